"""Talking to a KFP API for `imgpipe kfp submit|schedule`: its health endpoint asked once
(check_kfp_host), one run started, a recurring run created, and the API's refusals as
one line."""

from __future__ import annotations

import contextlib
import json
import urllib.error
import urllib.request
from typing import Any

from imgpipe.components.common.runtime.printable import shown
from imgpipe.pipelines.cli.errors import UserError

# kfp.Client's first call, and the one that tells a KFP API from anything else.
HEALTHZ_PATH = "/apis/v2beta1/healthz"
HOST_TIMEOUT_S = 10.0


def validate_cron(expression: str) -> str:
    """KFP schedules take six cron fields, seconds first."""
    fields = expression.split()
    if len(fields) != 6:
        raise ValueError(
            f"--cron needs six fields (seconds minutes hours day month weekday), "
            f'e.g. "0 0 3 * * *"; got {len(fields)} in {shown(expression)}'
        )
    return " ".join(fields)


def remote_pipeline_root(pipeline_root: str) -> str | None:
    """The config's pipeline_root when KFP can use it (an object-store URI), else None."""
    return pipeline_root if "://" in pipeline_root else None


def submit(
    client,
    package: str,
    experiment: str,
    params: dict[str, Any],
    run_name: str | None,
    namespace: str | None,
    service_account: str | None,
    pipeline_root: str | None = None,
):
    """Starts one run; returns kfp's RunPipelineResult."""
    return client.create_run_from_pipeline_package(
        package,
        arguments=params,
        run_name=run_name,
        experiment_name=experiment,
        namespace=namespace,
        service_account=service_account,
        pipeline_root=pipeline_root,
    )


def schedule(
    client,
    package: str,
    experiment: str,
    cron: str,
    job_name: str,
    params: dict[str, Any],
    namespace: str | None,
    service_account: str | None,
    pipeline_root: str | None = None,
):
    """Creates a recurring run: one at a time, and no catch-up of missed slots."""
    experiment_id = _experiment_id(client, experiment, namespace)
    return client.create_recurring_run(
        experiment_id=experiment_id,
        job_name=job_name,
        cron_expression=validate_cron(cron),
        max_concurrency=1,
        no_catchup=True,
        params=params,
        pipeline_package_path=package,
        enabled=True,
        service_account=service_account,
        pipeline_root=pipeline_root,
    )


def _experiment_id(client, name: str, namespace: str | None) -> str:
    try:
        experiment = client.get_experiment(experiment_name=name, namespace=namespace)
    except ValueError:  # kfp raises ValueError when no experiment has that name
        experiment = client.create_experiment(name=name, namespace=namespace)
    return experiment.experiment_id


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect (to a login page) is reported, not followed."""

    def redirect_request(self, *args, **kwargs):
        return None


def check_kfp_host(host: str, timeout: float = HOST_TIMEOUT_S) -> None:
    """Asks the KFP API's health endpoint, as kfp.Client does first, but once.

    kfp.Client retries an endpoint that does not answer five times, five seconds apart,
    logging a traceback each time. An answer that needs credentials (a login redirect,
    401, 403) is left to kfp.Client, which sends the ones its context holds.

    Raises:
      UserError: nothing answers at `host`, or what answers is not the KFP API.
    """
    url = kfp_url(host) + HEALTHZ_PATH
    fix = (
        "give --host the KFP API endpoint, e.g. http://localhost:8080 after "
        "'kubectl -n kubeflow port-forward svc/ml-pipeline-ui 8080:80'"
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(url, timeout=timeout) as response:
            body = response.read(65536)
    except urllib.error.HTTPError as e:
        if e.code in (301, 302, 303, 307, 308, 401, 403):
            return
        raise UserError(
            f"--host {host} is not the KFP API: GET {url} answered HTTP {e.code} {e.reason}; {fix}"
        ) from None
    except (urllib.error.URLError, OSError, ValueError) as e:
        reason = getattr(e, "reason", e)
        raise UserError(
            f"cannot reach the KFP API at {host}: GET {url} failed ({reason}); {fix}"
        ) from None
    try:
        answer = json.loads(body)
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise UserError(f"--host {host} is not the KFP API: GET {url} answered with no JSON; {fix}")


def kfp_url(host: str) -> str:
    """The endpoint as kfp.Client reads --host: https:// unless a scheme is given."""
    host = host.rstrip("/")
    return host if host.startswith("http") else "https://" + host


def client(host: str, namespace: str | None):
    """kfp.Client for `host`, once its health endpoint answered as the KFP API's."""
    import kfp

    check_kfp_host(host)
    return kfp.Client(host=host, namespace=namespace or "kubeflow")


@contextlib.contextmanager
def api_errors(host: str):
    """A refusal of the KFP API as one line that names the host and the answer."""
    import kfp_server_api

    try:
        yield
    except kfp_server_api.ApiException as e:
        body = " ".join(str(e.body or "").split())[:300]
        raise UserError(
            f"the KFP API at {host} refused the request: HTTP {e.status} {e.reason}"
            + (f": {body}" if body else "")
        ) from e
