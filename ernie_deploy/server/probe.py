"""Ask a running server for a real answer: a liveness check that sees what /v2/health cannot.

Triton's health endpoints report the server, not its python-backend stubs. A stub that dies (killed, out
of memory, a native crash) is never restarted by Triton 2.51, every request to its model fails, and
/v2/health/live and /v2/health/ready keep answering 200 (see watchdog.py). The pip launcher repairs that
itself; where tritonserver runs on its own (the NGC container), `ernie-deploy probe` is the container's
liveness check: it sends one short text through every loaded ensemble (or fused model), and exits non-zero if any fails,
so the orchestrator restarts the container.

Standard library only, over HTTP: it runs every few seconds as its own process, so it must start fast
and import nothing heavy. Over https:// (a TLS proxy in front of Triton's HTTP port, which has no TLS of its own)
with `tls`'s CA and client certificate.
"""

from __future__ import annotations

import json
import math
import time
import urllib.error
import urllib.request
from dataclasses import dataclass

from ernie_deploy.core.endpoints import DEFAULT_HTTP_URL
from ernie_deploy.core.errors import ServerNotReadyError
from ernie_deploy.core.tasks import OPTIONS
from ernie_deploy.core.tls import Tls

PROBE_TEXT = "ok"
# The server is local to the probe: an HTTP(S)_PROXY in the environment must not route it elsewhere.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# The most an answer of Triton's HTTP API may weigh here. Its largest, the statistics of every loaded model, is ~600
# bytes per model version (measured: 1,215 bytes for the two demo models); past this the URL is not a Triton server.
MAX_ANSWER_BYTES = 16 << 20
NOT_TRITON_FIX = "point the URL at tritonserver's HTTP port (8000 unless it was started with another)"


@dataclass(frozen=True)
class ProbeResult:
    model: str
    ok: bool
    seconds: float
    message: str = ""


class ProbeFailed(ServerNotReadyError):
    """The server cannot be probed at all (down, or nothing to send a text to), or one model cannot be. A caller
    that wraps it in an error of its own quotes its `problem` and gives the fix that fits the call it made."""


def _opener(tls: Tls | None) -> urllib.request.OpenerDirector:
    if tls is None:
        return _OPENER
    return urllib.request.build_opener(
        urllib.request.ProxyHandler({}), urllib.request.HTTPSHandler(context=tls.ssl_context())
    )


def http_json(
    url: str, timeout: float, body: dict | None = None, *, headers: dict | None = None, tls: Tls | None = None
) -> dict:
    """GET `url` (POST `body` as JSON) and return the JSON answer; ProbeFailed with Triton's reason if it fails."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, headers={**({"Content-Type": "application/json"} if data else {}), **(headers or {})}
    )
    try:
        with _opener(tls).open(req, timeout=timeout) as resp:
            payload = resp.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as e:  # Triton puts its reason in {"error": "..."}
        try:
            reason = json.loads(e.read() or b"{}").get("error") or e.reason
        except ValueError:
            reason = e.reason
        raise ProbeFailed(
            f"HTTP {e.code}: {reason}",
            "wait for the model to load (a model not ready answers 400), check its name, and send the server's admin "
            "key where it asks for one",
        ) from None
    except (urllib.error.URLError, OSError) as e:
        raise ProbeFailed(
            f"no answer from {url}: {getattr(e, 'reason', e)}",
            "check that tritonserver is up and that the URL is its HTTP port",
        ) from None
    if len(payload) > MAX_ANSWER_BYTES:
        raise ProbeFailed(
            f"{url} answered more than {MAX_ANSWER_BYTES >> 20} MiB: not Triton's HTTP API", NOT_TRITON_FIX
        )
    try:
        return json.loads(payload) if payload else {}
    except ValueError:  # an HTML page, another service on the port
        raise ProbeFailed(f"{url} answered something other than JSON: not Triton's HTTP API", NOT_TRITON_FIX) from None


def ensembles(url: str = DEFAULT_HTTP_URL, timeout: float = 5.0, tls: Tls | None = None) -> list[str]:
    """Names of the ready models users call: ensembles, each covering every step it wires, and fused models
    (python models that take only texts and do not answer with token ids, as a tokenizer step does).

    Read from the statistics (loaded models) and metadata (platform, tensors) APIs, which stay open where the
    server puts its repository index and model configs behind the admin key: a liveness check holds no secret.
    """
    stats = http_json(f"{url}/v2/models/stats", timeout, tls=tls)
    names = sorted({entry["name"] for entry in stats.get("model_stats", [])})
    return [name for name in names if _served(http_json(f"{url}/v2/models/{name}", timeout, tls=tls))]


def _served(meta: dict) -> bool:
    return meta.get("platform") == "ensemble" or takes_texts(meta)


def takes_texts(meta: dict) -> bool:
    """Whether a model that is not an ensemble is one users call (a fused model), from its metadata: it takes only
    texts and does not answer with token ids, as a tokenizer step does."""
    inputs, outputs = meta.get("inputs", []), {o.get("name") for o in meta.get("outputs", [])}
    return bool(inputs) and all(i.get("datatype") == "BYTES" for i in inputs) and "input_ids" not in outputs


def _text_tensor(spec: dict, text: str) -> dict:
    """The probe text for a text input; for what a request sends beside its texts (a UIE schema), its example."""
    shape = [1 if d < 0 else d for d in spec["shape"]]  # -1: the batch (or a variable) dim
    option = OPTIONS.get(spec["name"])
    value = option.example if option is not None else text
    return {"name": spec["name"], "datatype": "BYTES", "shape": shape, "data": [value] * math.prod(shape)}


def probe_model(
    name: str, url: str = DEFAULT_HTTP_URL, text: str = PROBE_TEXT, timeout: float = 5.0, tls: Tls | None = None
) -> ProbeResult:
    """One inference of `text` through model `name`, its text inputs found from the model's metadata."""
    t0 = time.monotonic()
    try:
        meta = http_json(f"{url}/v2/models/{name}", timeout, tls=tls)
        inputs = meta.get("inputs", [])
        if not inputs or any(i.get("datatype") != "BYTES" for i in inputs):
            raise ProbeFailed(
                f"expects inputs {[i['name'] for i in inputs]}, not the text inputs a probe can send",
                "probe the ensemble or fused model that takes the texts (without --model, every one is probed)",
            )
        # The same text in every text input: a pair model is probed with the text paired with itself.
        body = {"inputs": [_text_tensor(i, text) for i in inputs]}
        answer = http_json(f"{url}/v2/models/{name}/infer", timeout, body, tls=tls)
        if not answer.get("outputs"):
            raise ProbeFailed("answered with no outputs", "read the server's log for the model's errors")
    except ProbeFailed as e:  # the problem alone: the command that prints the results says what to do
        return ProbeResult(name, False, time.monotonic() - t0, e.problem)
    return ProbeResult(name, True, time.monotonic() - t0)


def probe(
    url: str = DEFAULT_HTTP_URL,
    models: list[str] | None = None,
    text: str = PROBE_TEXT,
    timeout: float = 5.0,
    tls: Tls | None = None,
) -> list[ProbeResult]:
    """Probe `models` (default: every ready ensemble). Raises ProbeFailed when there is nothing to probe."""
    url = url.rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    http_json(f"{url}/v2/health/live", timeout, tls=tls)
    names = models or ensembles(url, timeout, tls)
    if not names:
        raise ProbeFailed(
            f"{url} has no ready ensemble to send a text to",
            "wait for the server to load its models, or build one into its repository (`ernie-deploy build`)",
        )
    return [probe_model(name, url, text, timeout, tls) for name in names]
