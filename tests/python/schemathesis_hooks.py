"""Schemathesis hooks for skiff's own OpenAPI document (tests/tests/schemathesis.rs).

Three checks beside schemathesis' own:

- ``kubernetes_status_for_rejections``: every 4xx and 5xx answer is a
  Kubernetes ``Status`` (JSON, kind Status, apiVersion v1, status Failure,
  ``code`` equal to the HTTP code, a reason and a message).
- ``rejected_requests_change_nothing``: the store's revision (the
  ``resourceVersion`` of a list, which skiff serves at the store's current
  revision) is read before and after every request; a request answered
  4xx or 5xx must leave it where it was. schemathesis runs with one worker
  against a ``skiff up`` with no controllers, scheduler or kubelet, so the
  requests are the only writers; the probe's sanity is checked at load
  time (a write it does not see fails the run).
- ``watch_events_are_json_lines``: a watch's answer is WatchEvents, one
  JSON object a line (the list schema is not checked on it).

The hooks also keep the generated requests where they can reach stored
data: a namespace path parameter that is a DNS label becomes the fixture
namespace (random ones would all be 404s), and a watch is bounded to a
second so that it ends.

Settings come from the environment: SKIFF_ST_API (https://host:port),
SKIFF_ST_CA, SKIFF_ST_CERT, SKIFF_ST_KEY (the administrator's PEM files),
SKIFF_ST_NAMESPACE (the fixture namespace) and SKIFF_ST_LOG (a file that
gets one JSON line per request: method, path, status, revisions).
"""

import json
import os
import re
import threading

import requests
import schemathesis

API = os.environ["SKIFF_ST_API"].rstrip("/")
NAMESPACE = os.environ["SKIFF_ST_NAMESPACE"]
FIXTURE = "fixture"
LOG = os.environ.get("SKIFF_ST_LOG")

_session = requests.Session()
# REQUESTS_CA_BUNDLE and proxies from the environment would override the CA.
_session.trust_env = False
_session.verify = os.environ["SKIFF_ST_CA"]
_session.cert = (os.environ["SKIFF_ST_CERT"], os.environ["SKIFF_ST_KEY"])
_lock = threading.Lock()
# case id -> store revision before the request was sent
_before = {}
# case id -> (revision before, revision after) of a rejected request
_rejected = {}

REASONS = {
    400: {"BadRequest"},
    401: {"Unauthorized"},
    403: {"Forbidden"},
    404: {"NotFound"},
    405: {"MethodNotAllowed"},
    406: {"NotAcceptable"},
    409: {"AlreadyExists", "Conflict"},
    410: {"Gone", "Expired"},
    413: {"RequestEntityTooLarge"},
    415: {"UnsupportedMediaType"},
    422: {"Invalid"},
    429: {"TooManyRequests"},
    500: {"InternalError"},
    503: {"ServiceUnavailable"},
    504: {"Timeout"},
}


def store_revision():
    """The store's current revision, as the API reports it on a list."""
    reply = _session.get(f"{API}/api/v1/namespaces", params={"limit": "1"}, timeout=10)
    reply.raise_for_status()
    return int(reply.json()["metadata"]["resourceVersion"])


def _probe_sees_writes():
    """The revision probe must see a write, or the check could never fail."""
    before = store_revision()
    name = f"schemathesis-probe-{before}"
    created = _session.post(
        f"{API}/api/v1/namespaces/{NAMESPACE}/configmaps",
        json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}},
        timeout=10,
    )
    if created.status_code != 201:
        raise RuntimeError(f"the probe's ConfigMap was refused: {created.status_code} {created.text}")
    after = store_revision()
    if after <= before:
        raise RuntimeError(f"a write did not move the store's revision ({before} -> {after})")


_probe_sees_writes()


DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _bound_request(case):
    """Points a plausible namespace at the fixture one, and bounds watches.

    Done here rather than in map_* hooks, which the coverage phase skips.
    A namespaced object's name that is a DNS label becomes "fixture", the
    name of the objects the test made, so that updates reach one.
    A namespace that is no DNS label stays as generated: it tests the
    path's parsing, and can only be refused.
    """
    parameters = case.path_parameters or {}
    if isinstance(parameters.get("namespace"), str):
        if DNS_LABEL.match(parameters["namespace"]):
            parameters["namespace"] = NAMESPACE
        # The namespaced objects the test made beforehand are all "fixture".
        if isinstance(parameters.get("name"), str) and DNS_LABEL.match(parameters["name"]):
            parameters["name"] = FIXTURE
    # A watch streams until timeoutSeconds: bound it, else it is a hang.
    if isinstance(case.query, dict) and "watch" in case.query:
        case.query["timeoutSeconds"] = 1


@schemathesis.hook
def before_call(context, case, kwargs):
    _bound_request(case)
    revision = store_revision()
    with _lock:
        _before[case.id] = revision


def _watching(case):
    """Whether the request is a watch (skiff's flag values for true)."""
    if case.method != "GET" or not isinstance(case.query, dict):
        return False
    return str(case.query.get("watch", "false")).lower() in ("", "true", "1", "t")


@schemathesis.hook
def before_load_schema(context, raw_schema):
    """Reads `format: int-or-string` as Kubernetes' clients do.

    Kubernetes' documents (and skiff's, made the same way) give
    IntOrString `type: string` with that format, which clients take to
    mean an integer or a string; schemathesis would flag every integer
    port (a Service's targetPort) and never send one.
    """
    for schema in raw_schema.get("definitions", {}).values():
        if schema.get("format") == "int-or-string":
            schema["type"] = ["integer", "string"]


@schemathesis.hook
def filter_failure(context, failure, case, response):
    """Keeps failures, except the body checks of a watch's answer.

    The OpenAPI document gives a list operation one answer, the list, as
    Kubernetes' does; with watch=true the same operation streams
    WatchEvents, one JSON object a line, which the list schema cannot
    describe (``watch_events_are_json_lines`` checks them instead).
    """
    body_checks = ("ST108", "ST109")
    return not (
        _watching(case) and response.status_code == 200 and failure.code in body_checks
    )


@schemathesis.hook
def after_call(context, case, response):
    after = store_revision()
    with _lock:
        before = _before.pop(case.id, None)
        if response.status_code >= 400:
            _rejected[case.id] = (before, after)
    if LOG:
        record = {
            "method": case.method,
            "path": case.formatted_path,
            "query": case.query,
            "status": response.status_code,
            "before": before,
            "after": after,
        }
        with _lock, open(LOG, "a") as log:
            log.write(json.dumps(record, default=str) + "\n")


@schemathesis.check
def kubernetes_status_for_rejections(ctx, response, case):
    code = response.status_code
    if code < 400:
        return None
    content_type = response.headers.get("content-type", [""])[0]
    if not content_type.startswith("application/json"):
        raise AssertionError(f"a {code} answer with Content-Type {content_type!r}, not a JSON Status")
    try:
        status = json.loads(response.content)
    except ValueError as error:
        raise AssertionError(f"a {code} answer whose body is not JSON ({error})")
    if not isinstance(status, dict):
        raise AssertionError(f"a {code} answer whose body is not an object")
    wrong = []
    for field, want in (("kind", "Status"), ("apiVersion", "v1"), ("status", "Failure"), ("code", code)):
        if status.get(field) != want:
            wrong.append(f"{field} is {status.get(field)!r}, not {want!r}")
    reason = status.get("reason")
    if reason not in REASONS.get(code, {reason}) or not isinstance(reason, str) or not reason:
        wrong.append(f"reason {reason!r} does not go with {code}")
    if not isinstance(status.get("message"), str) or not status["message"]:
        wrong.append("no message")
    if wrong:
        raise AssertionError(f"the {code} Status is wrong: {'; '.join(wrong)}: {status}")
    return True


@schemathesis.check
def rejected_requests_change_nothing(ctx, response, case):
    if response.status_code < 400:
        return None
    with _lock:
        before, after = _rejected.get(case.id, (None, None))
    if before is None or after is None:
        return None
    if after != before:
        raise AssertionError(
            f"a request answered {response.status_code} moved the store's revision from {before} to {after}"
        )
    return True


@schemathesis.check
def watch_events_are_json_lines(ctx, response, case):
    if not (_watching(case) and response.status_code == 200):
        return None
    for line in response.content.splitlines():
        if not line.strip():
            continue
        event = json.loads(line)
        if event.get("type") not in ("ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"):
            raise AssertionError(f"a watch event of type {event.get('type')!r}: {event}")
        if not isinstance(event.get("object"), dict):
            raise AssertionError(f"a watch event with no object: {event}")
    return True
