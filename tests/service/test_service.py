"""The search service: a real ``autotune serve`` on loopback, driven by httpx, fuzzed by
schemathesis from its own OpenAPI schema, looked at in real Chromium; and workers serving the
queue on a real PostgreSQL server."""

from __future__ import annotations

import hashlib
import json
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import optuna
import pytest
import torch

from autotune.environment import cpu_model
from autotune.search import open_search, run, studies
from autotune.service.cache import FRESH_S
from autotune.ship import export
from autotune.storage import Store
from tests.browser import ARTIFACTS, CHROMIUM, chromium, console_errors, rendered_plots
from tests.helpers import S, fast_spec, point
from tests.postgres import PASSWORD
from tests.service.server import TOKEN, Server, autotune, finish, serve, start

pytestmark = pytest.mark.xdist_group("service")  # one server per module, on one xdist worker
AUTH = {"Authorization": f"Bearer {TOKEN}"}
GPT2 = {"model_type": "gpt2", "n_layer": 2, "n_embd": 32, "n_head": 2, "vocab_size": 64}
TOY = {"model": "toy-64", "layers": 2, "device": "cpu"}
LOOKUP = "model=toy-64&device=cpu"
WORKLOAD = {"kind": "inference", "batch_size": 1, "seq_len": 32, "dtype": "float32",
            "device": "cpu"}  # fmt: skip
SPEC = {
    "model": {"name": "toy-64", "layers": 2},
    "workload": {"device": "cpu"},
    "space": {"granularity": ["none", "full", "regional"], "backend": ["eager", "aot_eager"],
              "dynamic": ["none"], "fullgraph": [False]},
    "search": {"trials": 3, "iters": 3, "warmup": 1, "timeout": 120},
}  # fmt: skip


@dataclass
class Site:
    """A served SQLite storage: a real study measured here and exported (``real``), a
    hand-built one whose pick has a kept cache artefact (``kept``) and one whose stored
    artefact checksum is a path (``tampered``)."""

    server: Server
    folder: Path
    url: str
    artefact: bytes


def _hand_built(url: str, folder: Path) -> bytes:
    env = {"torch": torch.__version__, "device": "cpu", "device_name": "hand"}
    store = Store(url)
    data = b"torch's cache bytes, as save_cache_artifacts wrote them"
    digest = hashlib.sha256(data).hexdigest()
    (folder / "artifacts").mkdir()
    (folder / "artifacts" / f"{digest}.cache.bin").write_bytes(data)
    (folder / "secret.txt").write_text("not for download")
    for study, sha in (("kept", digest), ("tampered", "../../secret.txt")):
        store.add_study(study, {"model": {"name": "toy-64"}, "policy": "fastest", "trials": 3,
                                "workload": WORKLOAD}, env)  # fmt: skip
        for i, (name, c, ms) in enumerate((("none", 0.0, 10.0), ("A", 1.0, 5.0), ("B", 9.0, 2.0))):
            payload = point(S[name], c, ms)
            if name == "B":
                payload["artifact"] = {"sha256": sha, "bytes": len(data),
                                       "fingerprint": {"torch": torch.__version__}}  # fmt: skip
            store.add_measurement(study, S[name].key, i, payload)
    return data


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    folder = tmp_path_factory.mktemp("site")
    url = f"sqlite:///{folder}/s.db"
    with pytest.MonkeyPatch.context() as env:
        env.setenv("AUTOTUNE_STUDIES", str(folder / "studies"))  # its caches go there
        spec = fast_spec(trials=3, layers=2, granularity="none,full", dynamic="none",
                         fullgraph="false", iters=3, study="real")  # fmt: skip
        search = open_search(spec, url)
        run(search)
        export.export(search.store, "real", "knee", "accelerate", str(folder / "best.json"))
    data = _hand_built(url, folder)
    models = folder / "models"
    (models / "tiny-gpt2").mkdir(parents=True)
    (folder / "outside").mkdir()
    for where in (models / "tiny-gpt2", folder / "outside"):
        (where / "config.json").write_text(json.dumps(GPT2))
    (models / "escape").symlink_to(folder / "outside")
    server = serve(folder / "srv", "--storage", url, "--model-root", str(models),
                   extra_env={"AUTOTUNE_TOKEN": TOKEN,
                              "AUTOTUNE_ARTIFACTS": str(folder / "artifacts")})  # fmt: skip
    try:
        yield Site(server, folder, url, data)
    finally:
        output = server.stop()
        assert "Traceback" not in output, output[-3000:]


def one_line_error(response: httpx.Response, status: int, needle: str = "") -> str:
    """The response is ``status`` with one line of JSON, ``{"error": ...}``; its text."""
    assert response.status_code == status, (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    assert list(body) == ["error"] and "\n" not in body["error"] and body["error"]
    assert needle in body["error"], body["error"]
    return body["error"]


@pytest.mark.slow
def test_the_lookup_answers_with_the_export_and_404_when_none_exists(site: Site) -> None:
    exported = json.loads(Store(site.url).latest_export("real").content)  # type: ignore[union-attr]
    with site.server.client() as http:
        found = http.get("/api/lookup", params=TOY)
        assert found.status_code == 200, found.text
        body = found.json()
        assert body["study"] == "real" and body["exported"] is True
        assert body["config"] == exported and body["key"] == exported["autotune"]["key"]
        exact = {**TOY, "device_name": cpu_model(), "torch": torch.__version__,
                 "batch_size": 1, "seq_len": 32, "dtype": "float32"}  # fmt: skip
        assert http.get("/api/lookup", params=exact).json()["config"] == exported
        public = {**exact, "torch": torch.__version__.partition("+")[0]}  # any local build
        assert http.get("/api/lookup", params=public).status_code == 200
        for miss in ({"device_name": "NVIDIA H100 80GB HBM3"}, {"torch": "2.99.0"},
                     {"layers": None}, {"device": "cuda"}, {"dtype": "bfloat16"},
                     {"workload": "train"}, {"batch_size": 8}):  # fmt: skip
            asked = {k: v for k, v in {**exact, **miss}.items() if v is not None}
            one_line_error(http.get("/api/lookup", params=asked), 404, "has an answer yet")
        one_line_error(http.get("/api/lookup", params={**exact, "batch_size": 0}), 422)
        one_line_error(http.get("/api/lookup", params={**exact, "device": "tpu"}), 422)
        one_line_error(http.get("/api/lookup", params={"device": "cpu"}), 422, "model")


@pytest.mark.slow
def test_the_studies_and_one_study_with_its_trials_and_front(site: Site) -> None:
    with site.server.client() as http:
        rows = {s["study"]: s for s in http.get("/api/studies").json()["studies"]}
        assert set(rows) == {"real", "kept", "tampered"}
        real = rows["real"]
        assert (real["measured"], real["budget"], real["done"], real["exported"]) == (3, 3, 1, 1)
        assert real["model"] == "toy-64" and real["layers"] == 2 and real["torch"]
        assert real["device"] == "cpu" and real["device_name"] == cpu_model()
        assert real["pick"]["key"] and real["pick"]["speedup"] and real["last"]
        assert rows["kept"]["pick"]["key"] == S["B"].key  # policy fastest
        one = http.get("/api/studies/real").json()
        assert len(one["trials"]) == 3 and one["front"] and one["policy"] == "amortized:1h"
        assert {p["key"] for p in one["front"]} <= {t["key"] for t in one["trials"]}
        assert one["pick"]["key"] in {p["key"] for p in one["front"]}
        one_line_error(http.get("/api/studies/missing"), 404, "no study named 'missing'")
        one_line_error(http.get("/api/studies/a..b"), 400, "bad study name")
        one_line_error(http.get("/studies/a..b"), 400, "bad study name")
        one_line_error(http.get("/api/studies/..%2F..%2Fstudies"), 404)
        one_line_error(http.get("/no/such/page"), 404, "no such page")
        one_line_error(http.delete("/api/studies/real"), 405)


@pytest.mark.slow
def test_export_formats_and_the_cache_artefact_download(site: Site) -> None:
    with site.server.client() as http:
        yaml = http.get("/api/studies/real/export", params={"format": "accelerate-yaml"})
        assert yaml.headers["content-type"].startswith("application/yaml")
        assert "dynamo_config:" in yaml.text and "# autotune: study real" in yaml.text
        torch_kwargs = http.get("/api/studies/real/export", params={"format": "torch"}).json()
        assert torch_kwargs["granularity"] == torch_kwargs["autotune"]["granularity"]
        one_line_error(http.get("/api/studies/real/export", params={"policy": "bogus"}), 400,
                       "bad policy")  # fmt: skip
        one_line_error(http.get("/api/studies/real/export", params={"format": "xml"}), 422)
        one_line_error(http.get("/api/studies/real/artifact"), 404, "has no cache artefact")
        kept = http.get("/api/studies/kept/export").json()["autotune"]
        block = kept["cache_artifact"]
        assert kept["key"] == S["B"].key and block["file"] == "best.cache.bin"
        download = http.get(block["download"])
        assert download.status_code == 200 and download.content == site.artefact
        assert hashlib.sha256(download.content).hexdigest() == block["sha256"]
        assert "best.cache.bin" in download.headers["content-disposition"]
        tampered = http.get("/api/studies/tampered/export").json()["autotune"]
        assert "cache_artifact" not in tampered  # a stored path is never followed
        one_line_error(http.get("/api/studies/tampered/artifact"), 404, "not kept")


def _snapshot(url: str) -> tuple:
    store = Store(url)
    return store.stamp(), sorted(optuna.get_all_study_names(url)), len(store.claims("real"))


@pytest.mark.slow
def test_every_refusal_is_4xx_one_line_and_changes_nothing(site: Site) -> None:
    wrong = {"Authorization": "Bearer " + "x" * len(TOKEN)}
    basic = {"Authorization": f"Basic {TOKEN}"}
    root = site.folder / "models"

    def spec(**tables: dict) -> dict:
        return {**SPEC, **{k: {**SPEC.get(k, {}), **v} for k, v in tables.items()}}

    cases = [  # (headers, body, status, what the error says)
        ({}, spec(), 401, "has no token"),
        (wrong, spec(), 401, "a wrong token"),
        (basic, spec(), 401, "has no token"),
        (AUTH, spec(model={"name": "tests.models:tiny_toy"}), 403, "names code"),
        (AUTH, spec(space={"backend": ["eager", "tests.models:slow_backend"]}), 403, "names code"),
        (AUTH, spec(space={"backend": "eager,os:system"}), 403, "names code"),
        (AUTH, spec(model={"name": "../outside"}), 403, "outside the model root"),
        (AUTH, spec(model={"name": str(site.folder / "outside")}), 403, "outside the model root"),
        (AUTH, spec(model={"name": "escape"}), 403, "outside the model root"),
        (AUTH, spec(model={"name": "toy-64", "weights": "/etc"}), 403, "outside the model root"),
        (AUTH, spec(model={"name": "no-such-model"}), 400, "no such directory"),
        (AUTH, spec(search={"study": "../../dashboards/x"}), 400, "bad study name"),
        (AUTH, spec(search={"study": "real"}), 409, "exists already"),
        (AUTH, spec(search={"trials": 2.7}), 400, "whole number"),
        (AUTH, spec(workload={"device": "auto"}), 400, "name the workers'"),
        (AUTH, spec(workload={"dtype": "auto"}), 400, "the workers serve in"),
        (AUTH, spec(workload={"traffic": "/etc/passwd"}), 400, "not a file on the server"),
        (AUTH, spec(workload={"traffic": [[1, 8], [1, -2]]}), 400, "request 2"),
        (AUTH, spec(space={"backend": [{"a": 1}]}), 400, "expected a value"),
        (AUTH, {**spec(), "server": {"x": 1}}, 422, "server"),
        (AUTH, [1, 2], 422, "bad request"),
        (AUTH, b"{not json", 400, "not JSON"),
        (AUTH, b"{" + b" " * 70_000 + b"}", 413, "over the limit"),
    ]
    before = _snapshot(site.url)
    with site.server.client() as http:
        for headers, body, status, needle in cases:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            got = http.post("/api/studies", content=content,
                            headers={**headers, "Content-Type": "application/json"})  # fmt: skip
            one_line_error(got, status, needle)
            if status == 401:
                assert got.headers["www-authenticate"] == "Bearer"
        assert _snapshot(site.url) == before  # nothing stored changed, no code was imported
        # the gates from the other side: the token, a preset, a directory under the root
        ok = http.post("/api/studies", json=spec(search={"study": "accepted"}), headers=AUTH)
        assert ok.status_code == 201, ok.text
        assert ok.json() == {"study": "accepted", "page": "/studies/accepted",
                             "api": "/api/studies/accepted"}  # fmt: skip
        local = spec(model={"name": "tiny-gpt2"}, search={"study": "local"})
        assert http.post("/api/studies", json=local, headers=AUTH).status_code == 201
        served = spec(model={"name": "tiny-gpt2"}, workload={"traffic": [[1, 8], [2, 16]]},
                      search={"study": "served"})  # fmt: skip
        assert http.post("/api/studies", json=served, headers=AUTH).status_code == 201
    served = studies.study(Store(site.url), "served")
    assert served is not None and served.spec.workload.traffic == ((1, 8), (2, 16))
    stored = studies.study(Store(site.url), "local")
    assert stored is not None and stored.spec.model.name == str(root / "tiny-gpt2")
    assert {"accepted", "local"} <= set(optuna.get_all_study_names(site.url))
    assert "tests.models" not in site.server.output()


@pytest.mark.slow
def test_schemathesis_finds_no_server_error_and_no_schema_violation(site: Site) -> None:
    """Every operation of the service's own schema, valid and invalid inputs, with the token
    (so that submits get past the gate): no 5xx, every answer as the schema says."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis import GenerationMode
    from schemathesis.checks import max_response_time, positive_data_acceptance

    schema = schemathesis.openapi.from_url(f"{site.server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.label for op in operations} >= {"GET /api/lookup", "POST /api/studies"}
    tried = 0
    for op in operations:
        for mode in GenerationMode:

            @given(case=op.as_strategy(generation_mode=mode))
            @settings(max_examples=12, deadline=None, database=None, derandomize=True,
                      phases=[Phase.explicit, Phase.generate],
                      suppress_health_check=list(HealthCheck))  # fmt: skip
            def check(case: schemathesis.Case) -> None:
                nonlocal tried
                tried += 1
                # rejecting a schema-valid spec that names no preset is right: not a failure
                case.call_and_validate(base_url=site.server.url, headers=AUTH, timeout=60,
                                       excluded_checks=[positive_data_acceptance,
                                                        max_response_time])  # fmt: skip

            try:
                check()
            except Unsatisfiable:  # an operation with no input has no invalid one
                assert mode is GenerationMode.NEGATIVE and not op.label.endswith("}"), op.label
    assert tried >= 50


def _cli_error(argv: list[str]) -> str:
    """Run the CLI in-process: it must end with exit 2 and one line on stderr; that line."""
    import contextlib
    import io

    from autotune.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's usage errors exit from inside the parser
            code = exc.code
    assert code == 2 and err.getvalue().count("\n") == 1, (code, err.getvalue())
    return err.getvalue()


def test_the_token_is_compared_and_the_bind_checked() -> None:
    from fastapi.security import HTTPAuthorizationCredentials

    from autotune.service import check_bind, loopback
    from autotune.service.guard import token_gate

    assert all(map(loopback, ("127.0.0.1", "::1", "localhost", "127.0.0.2")))
    assert not any(map(loopback, ("0.0.0.0", "10.1.2.3", "example.org", "::")))
    check_bind("127.0.0.1", None)  # loopback: no token needed
    check_bind("0.0.0.0", TOKEN)  # anything else: with a token
    assert "needs a token" in _cli_error(["serve", "--host", "0.0.0.0"])
    assert "at least 16" in _cli_error(["serve", "--token", "short"])
    assert "no such directory" in _cli_error(["serve", "--model-root", "/no/such/dir"])
    assert "unrecognized arguments: --study" in _cli_error(["queue-worker", "--study", "x"])
    assert "unrecognized arguments: --all" in _cli_error(["worker", "--all"])
    assert "invalid choice: 'yaml'" in _cli_error(["export", "--study", "x", "--format", "yaml"])

    def bearer(token: str) -> HTTPAuthorizationCredentials:
        return HTTPAuthorizationCredentials(scheme="Bearer", credentials=token)

    gate = token_gate(TOKEN)
    with pytest.raises(Exception, match="wrong token"):
        gate(bearer("y" * len(TOKEN)))
    with pytest.raises(Exception, match="wrong token"):
        gate(bearer(TOKEN[:-1]))
    gate(bearer(TOKEN))  # the right one passes
    with pytest.raises(Exception, match="takes no writes"):
        token_gate(None)(bearer(TOKEN))  # a service without a token takes no writes


def test_the_listening_socket_gives_connections_without_delayed_acks() -> None:
    """Connections accepted on ``autotune serve``'s socket have TCP_NODELAY (asyncio sets it
    only on a socket made with IPPROTO_TCP): without it every answer waited 40 ms for a
    delayed ACK (bench/service.py: 44 ms a request at one client, 1.6 ms with it). A plain
    socket, as made before, is the case that must fail."""
    import asyncio
    import socket

    from autotune.cli.serve import _listen

    async def nodelay(sock: socket.socket) -> int:
        seen: list[int] = []

        async def accepted(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            raw = writer.get_extra_info("socket")
            seen.append(raw.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        async with server:
            _, writer = await asyncio.open_connection(*sock.getsockname()[:2])
            while not seen:
                await asyncio.sleep(0.01)
            writer.close()
        return seen[0]

    assert asyncio.run(nodelay(_listen("127.0.0.1", 0))) != 0
    plain = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    plain.bind(("127.0.0.1", 0))
    plain.listen()
    assert asyncio.run(nodelay(plain)) == 0


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_the_index_and_a_study_page_in_real_chromium(site: Site) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    dom, log = chromium(site.server.url + "/", ARTIFACTS / "service-index.png", height=900)
    assert console_errors(log) == []
    assert 'data-polls="' in dom  # the script fetched /api/studies and drew the rows
    for study in ("real", "kept", "tampered"):
        assert f'data-study="{study}"' in dom
    real = httpx.get(site.server.url + "/api/studies/real").json()
    for text in ("toy-64 (2 layers)", real["pick"]["key"], "3/3 measured", cpu_model(),
                 f"{real['pick']['speedup']:.2f}x", "updated"):  # fmt: skip
        assert text in dom, text
    page = httpx.get(site.server.url + "/studies/real")
    assert page.status_code == 200 and len(page.text) < 1_000_000  # plotly.js is sent apart
    dom, log = chromium(site.server.url + "/studies/real", ARTIFACTS / "service-study.png")
    assert 'data-errors="' not in dom and console_errors(log) == []
    assert rendered_plots(dom) == 7 and "autotune · real" in dom
    assert real["pick"]["key"] in dom


@pytest.mark.slow
def test_the_password_never_shows_and_a_lost_database_is_503(tmp_path: Path) -> None:
    """On a private PostgreSQL server (stopped mid-test): no page, answer or log line holds
    the password; while the server is down every request gets 503 with Retry-After."""
    import time

    from tests import postgres as pg

    if pg.bindir() is None:
        pytest.skip("needs PostgreSQL server binaries (Debian's postgresql; .ci/run installs it)")
    db = pg.start()
    server = None
    try:
        store = Store(db.url)
        env = {"torch": torch.__version__, "device": "cpu", "device_name": "x"}
        store.add_study("hand", {"model": {"name": "toy-64"}, "workload": {"device": "cpu"}}, env)
        for i, name in enumerate(("none", "A", "B")):
            store.add_measurement("hand", S[name].key, i, point(S[name], i, 10.0 - 3 * i))
        server = serve(tmp_path, "--storage", db.url)  # no token: read-only
        seen = []
        with server.client() as http:
            for path in ("/", "/studies/hand", "/api/studies", "/api/studies/hand",
                         "/api/studies/hand/export", "/api/studies/nope", "/openapi.json",
                         "/api/lookup?" + LOOKUP, "/api/health"):  # fmt: skip
                got = http.get(path)
                assert got.status_code in (200, 404), (path, got.text[:300])
                seen.append(got.text + str(got.headers))
            refused = http.post("/api/studies", json=SPEC, headers=AUTH)
            one_line_error(refused, 403, "takes no writes")
            seen.append(refused.text)
            assert "postgresql://autotune:***@" in http.get("/api/health").json()["storage"]
            db.pg_ctl("stop", "-m", "fast")
            time.sleep(FRESH_S)  # an answer may be FRESH_S old: then it is asked of the database
            for path in ("/api/studies", "/api/health", "/", "/api/lookup?" + LOOKUP):
                got = http.get(path)
                one_line_error(got, 503)
                assert int(got.headers["retry-after"]) > 0
                seen.append(got.text + str(got.headers))
            db.pg_ctl("start")
            deadline = time.monotonic() + 60
            while http.get("/api/health").status_code != 200:  # a stale connection or two
                assert time.monotonic() < deadline, "the service did not come back"
                time.sleep(0.5)
            assert http.get("/api/studies").status_code == 200
        output = server.stop()
        assert all(PASSWORD not in text for text in seen)
        assert PASSWORD not in output and "Traceback" not in output
        assert "postgresql://autotune:***@" in output
    finally:
        if server is not None:
            server.stop()
        pg.stop(db)


def test_queue_standing_counts_a_silent_claim_as_free(in_tmp: Path) -> None:
    """A study whose budget is held by a dead worker's claim is open again once the claim is
    silent: the queue never loses a strategy."""
    import sqlalchemy

    from autotune.coordination import Coordinator
    from autotune.errors import ConfigError
    from autotune.job.queue import Queue, space_keys, standing
    from autotune.job.worker import allowed_by, device_for
    from autotune.search import submit
    from autotune.search.spec import StudySpec
    from autotune.search.studies import StudyRecord

    url = f"sqlite:///{in_tmp}/q.db"
    spec = StudySpec.from_tables(SPEC, study="q")
    submit(spec, url)
    store = Store(url)
    keys = space_keys(spec, "cpu")
    assert len(keys) == 5 and standing(store, "q", keys, 3).open
    store.add_measurement("q", "none", 0, point(S["none"], 0.0, 10.0))
    full = next(k for k in keys if k.startswith("full/eager"))
    regional = next(k for k in keys if k.startswith("regional/eager"))
    for key, worker in ((full, "w1"), (regional, "w2")):
        assert Coordinator(store, "q", worker).claim(key, None, 3, keys) == "claimed"
    held = standing(store, "q", keys, 3)
    assert (held.measured, held.held, held.open) == (1, 2, False)  # all 3 in live hands
    engine = sqlalchemy.create_engine(url)
    with engine.begin() as c:  # w2 went silent long ago
        c.execute(sqlalchemy.text("UPDATE autotune_claims SET heartbeat = 0 WHERE worker = 'w2'"))
    again = standing(store, "q", keys, 3)
    assert (again.held, again.open) == (1, True)
    here = {"torch": torch.__version__, "device": "cpu", "device_name": cpu_model(),
            "cuda": torch.version.cuda}  # fmt: skip
    queue = Queue(store, device_for(None), lambda d, dtype: here, allowed_by([]))
    assert queue.next() is not None and queue.next().name == "q"  # type: ignore[union-attr]
    assert queue.next(exclude=["q"]) is None
    other = Store(url)
    other.set_environment("q", {**here, "torch": "2.0.0"})  # measured with another torch
    assert queue.next() is None
    assert "differs" in (queue.why_not(studies.study(other, "q")) or "")  # type: ignore[arg-type]
    toy = {"model": {"name": "toy-64"}}
    gpu = StudyRecord("g", {**toy, "workload": {"device": "cuda"}}, {}, None)
    assert "not on this machine" in (queue.why_not(gpu) or "")  # a CPU machine's worker
    worn = StudyRecord("w", {**toy, "trials": "all"}, {}, None)
    with pytest.raises(ConfigError, match="trials = 'all'"):  # as its worker would refuse it
        queue.why_not(worn)
    code = StudySpec.from_dict({"model": {"name": "pkg.mod:fn"}})
    assert allowed_by([])(code) is not None and allowed_by(["pkg.mod"])(code) is None
    backend = StudySpec.from_dict({**toy, "space": {"backend": ["pkg.mod:be"]}})
    assert "pkg.mod:be" in (allowed_by(["pkg.mod:fn"])(backend) or "")


def test_a_queue_worker_exits_when_asked(in_tmp: Path) -> None:
    import time

    worker = start(in_tmp, "queue-worker")
    try:
        deadline = time.monotonic() + 120
        assert worker.stdout is not None
        first = worker.stdout.readline()  # it has started serving
        assert "worker serving the queue" in first and time.monotonic() < deadline
        time.sleep(1)
        worker.send_signal(signal.SIGTERM)
        out, err = finish(worker, timeout=60)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    assert worker.returncode == 0, err[-2000:]
    assert "stopped: asked" in out and "Traceback" not in err


@pytest.mark.slow
def test_submit_over_http_then_two_queue_workers_on_postgres(postgres, tmp_path: Path) -> None:
    """Submit over HTTP, then two ``queue-worker`` processes finish it; a CUDA study and one
    that names code wait for workers that can run them; the lookup answers with the export."""
    from tests.job.test_workers import _consistent

    url = postgres.url
    server = serve(tmp_path / "srv", "--storage", url, extra_env={"AUTOTUNE_TOKEN": TOKEN})
    workers = []
    try:
        with server.client(headers=AUTH) as http:
            for name, extra in (("queued", {}), ("for-gpu", {"workload": {"device": "cuda"}})):
                body = {**SPEC, **extra, "search": {**SPEC["search"], "study": name}}
                assert http.post("/api/studies", json=body).status_code == 201
            (tmp_path / "coded.toml").write_text(
                '[model]\nname = "tests.models:tiny_toy"\n[workload]\ndevice = "cpu"\n'
                '[search]\ntrials = 2\nstudy = "coded"\n')  # fmt: skip
            submitted = autotune(tmp_path, "submit", "--space", "coded.toml", "--storage", url)
            assert submitted.returncode == 0, submitted.stderr
            one_line_error(http.get("/api/lookup", params=TOY), 404)
            workers = [start(tmp_path, "queue-worker", "--idle-timeout", "6s",
                             "--no-confirm", AUTOTUNE_STORAGE=url) for _ in range(2)]  # fmt: skip
            outs = [finish(w) for w in workers]
            for w, (out, err) in zip(workers, outs, strict=True):
                assert w.returncode == 0, err[-3000:]
                assert "stopped: idle" in out and "Traceback" not in err
                assert PASSWORD not in out + err
            assert sum("finished queued" in out for out, _ in outs) >= 1
            _consistent(url, "queued", 3)
            store = Store(url)
            assert store.measurements("for-gpu") == [] and store.measurements("coded") == []
            latest = store.latest_export("queued")
            assert latest is not None
            found = http.get("/api/lookup", params={**TOY, "torch": torch.__version__})
            assert found.status_code == 200, found.text
            assert found.json()["config"] == json.loads(latest.content)
            assert found.json()["study"] == "queued" and found.json()["exported"] is True
    finally:
        for w in workers:
            if w.poll() is None:
                w.kill()
                w.wait()
        output = server.stop()
    assert PASSWORD not in output and "Traceback" not in output


@pytest.mark.slow
def test_the_lookup_says_whether_the_pick_s_artefact_fits_the_asker(site: Site) -> None:
    """Given the asker's fingerprint fields, the lookup judges each artefact of the pick as
    autotune check does: the fields given that differ, and only those."""
    from autotune.service.lookup import artefact_fits

    store = Store(site.url)
    answer = {"study": "kept", "key": S["B"].key}  # B ships a cache made with this torch
    same = artefact_fits(store, answer, {"torch": torch.__version__, "cpu_isa": "avx2"})
    assert same == {"cache": {"fits": True, "differs": {}}}  # its ISA was not recorded
    other = artefact_fits(store, answer, {"torch": "2.0.0"})
    assert other == {"cache": {"fits": False, "differs": {"torch": [torch.__version__, "2.0.0"]}}}
    assert artefact_fits(store, {"study": "kept", "key": S["none"].key}, {"torch": "2.0"}) == {}
    with site.server.client() as http:
        asked = http.get("/api/lookup", params={**TOY, "float32_matmul_precision": "high"})
        assert asked.status_code == 200 and "fits" in asked.json(), asked.text
        assert http.get("/api/lookup", params=TOY).json().get("fits") is None  # the fast path
        one_line_error(http.get("/api/lookup", params={**TOY, "device_index": -1}), 422)
