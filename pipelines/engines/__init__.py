"""Distributed engines started on this machine for Beam's portable runners.

`processes` supervises a set of server processes (each in its own process group, stopped
on success, failure and Ctrl-C); `artifacts` finds the jars fetched into the artifact
cache; `flink` starts a Flink session cluster from them.
"""
