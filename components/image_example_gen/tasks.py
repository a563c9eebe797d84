"""The conversion plan's tasks, and how they reach the workers: as task files, never
inside the pipeline graph."""

from __future__ import annotations

import dataclasses
import json
import math
import os

import apache_beam as beam

from imgpipe.components.common.runtime import phases
from imgpipe.components.common.storage import fileio

# Images per pipeline element: one batch goes through a worker's thread pool at once.
CONVERT_BATCH = 32
# Batches per task file. The plan reaches the workers as files, never inside the
# pipeline graph: a Create of every path is pickled and bz2-compressed on the launcher
# (measured 6.6 s per graph conversion at 100,000 images) and outgrows Dataflow's
# job-graph limit at a few million.
TASK_BATCHES_PER_FILE = 1024
TASK_FILE_PREFIX = "tasks"


@dataclasses.dataclass(frozen=True)
class ConversionTask:
    relpath: str
    label: str
    label_id: int
    split: str  # under split_by content, provisional: decided after conversion


def batch_tasks(
    tasks: list[ConversionTask], size: int = CONVERT_BATCH
) -> list[list[ConversionTask]]:
    return [tasks[i : i + size] for i in range(0, len(tasks), size)]


def task_batch_to_json(batch: list[ConversionTask]) -> str:
    return json.dumps([[t.relpath, t.label, t.label_id, t.split] for t in batch])


def task_batch_from_json(line: str) -> list[ConversionTask]:
    phases.reached(phases.CONVERTING)  # each batch is converted as soon as it is read
    return [
        ConversionTask(relpath, label, int(label_id), split)
        for relpath, label, label_id, split in json.loads(line)
    ]


def write_task_files(
    tasks: list[ConversionTask],
    directory: str,
    batch_size: int = CONVERT_BATCH,
    batches_per_file: int = TASK_BATCHES_PER_FILE,
) -> str:
    """Writes the conversion plan as JSON lines, one batch of tasks a line.

    Returns:
      The glob pattern of the files, for ReadTaskBatches.
    """
    batches = batch_tasks(tasks, batch_size)
    num_files = max(1, math.ceil(len(batches) / batches_per_file))
    fileio.makedirs(directory)
    for index in range(num_files):
        lines = batches[index * batches_per_file : (index + 1) * batches_per_file]
        name = f"{TASK_FILE_PREFIX}-{index:05d}-of-{num_files:05d}.jsonl"
        with fileio.open_file(os.path.join(directory, name), "w") as f:
            f.write("".join(task_batch_to_json(batch) + "\n" for batch in lines))
    return os.path.join(directory, f"{TASK_FILE_PREFIX}-*.jsonl")


@beam.ptransform_fn
def ReadTaskBatches(pbegin: beam.pvalue.PBegin, pattern: str) -> beam.PCollection:  # noqa: N802
    """The batches of ConversionTask that write_task_files wrote; runners split the
    files among workers like any text input."""
    return (
        pbegin
        | "ReadLines" >> beam.io.ReadFromText(pattern)
        | "Parse" >> beam.Map(task_batch_from_json)
    )
