"""Secrets never leave the process: the redactor's probes and its prose.

Why two tables: a redactor is judged both ways. Every probe is a shape a
real launch command, run card, header or error text takes, and its secret
must vanish while the words around it stay; every line of ordinary prose
and ordinary command lines must come back byte-identical, or the published
launch command and notes stop being worth reading. End to end, `bench
import` and `bench run` must write no key anywhere in what they produce.
"""

from __future__ import annotations

import dataclasses
import json
from collections import namedtuple
from pathlib import Path

import pytest
import yaml

from rundir.contract import Engine
from rundir.io import read_run
from rundir.redact import REDACTED, is_secret_name, redact, redact_tree, redact_url, url_secrets
from tests.conftest import run_cli
from tests.refserver.harness import refserver_fixture  # noqa: F401

SEEDS = Path(__file__).resolve().parents[1] / "data" / "import" / "seeds"
QWEN = SEEDS / "qwen3.5-4b-bf16-rtxpro6000.txt"

# (probe id, text, the secret that must vanish). Each secret value is distinct,
# so a probe cannot pass because another rule happened to remove the same text.
PROBES = [
    ("api-key-space", "vllm serve m --api-key Sv01-plain --port 8000", "Sv01-plain"),
    ("api-key-equals", "vllm serve m --api-key=Sv02-equals --port 8000", "Sv02-equals"),
    ("api-key-double-quoted", 'vllm serve m --api-key "Sv03 with space"', "Sv03 with space"),
    ("api-key-single-quoted", "vllm serve m --api-key='Sv04-quoted'", "Sv04-quoted"),
    ("api_key-underscore-flag", "python -m server --api_key Sv05under", "Sv05under"),
    ("short-k", "llama-server -m m.gguf -k Sv06short --port 8080", "Sv06short"),
    ("key", "serve --key Sv07key --host 0.0.0.0", "Sv07key"),
    ("token", "tool --token Sv08token run", "Sv08token"),
    ("password", "tool --password Sv09pass run", "Sv09pass"),
    ("password-equals-quoted", 'tool --password="Sv10 pass"', "Sv10 pass"),
    ("hf-token", "vllm serve m --hf-token Sv11hf --port 1", "Sv11hf"),
    ("hf-token-equals", "vllm serve m --hf-token=Sv12hf", "Sv12hf"),
    ("single-dash-long-flag", "server -token Sv13dash -port 1", "Sv13dash"),
    ("client-secret-flag", "proxy --client-secret Sv14cs", "Sv14cs"),
    ("api-keys-plural", "lmdeploy serve api_server m --api-keys Sv15many", "Sv15many"),
    ("flag-line-continuation", "vllm serve m \\\n  --api-key \\\n  Sv16cont \\\n  --port 1", "Sv16cont"),
    ("flag-in-json-args", '"args": ["serve", "m", "--api-key", "Sv17json", "--port", "1"]', "Sv17json"),
    ("flag-in-yaml-args", "args:\n  - --api-key\n  - Sv18yaml\n  - --port", "Sv18yaml"),
    ("env-openai", "OPENAI_API_KEY=Sv19env bench run", "Sv19env"),
    ("env-export-quoted", 'export HF_TOKEN="Sv20env"', "Sv20env"),
    ("docker-e", "docker run -e VLLM_API_KEY=Sv21dock --gpus all vllm/vllm-openai", "Sv21dock"),
    ("docker-env-long", "docker run --env HUGGING_FACE_HUB_TOKEN=Sv22hub img", "Sv22hub"),
    ("env-aws-secret", "AWS_SECRET_ACCESS_KEY=Sv23aws aws s3 ls", "Sv23aws"),
    ("env-one-word", "PGPASSWORD=Sv24pg psql -h db", "Sv24pg"),
    ("compose-env-item", "environment:\n  - HF_TOKEN=Sv25comp\n  - MAX_JOBS=2", "Sv25comp"),
    ("json-api_key", '{"model": "m", "api_key": "Sv26json", "max_tokens": 4096}', "Sv26json"),
    ("json-camel", '{"apiKey":"Sv27camel"}', "Sv27camel"),
    ("json-hf_token", '{"hf_token": "Sv28hft"}', "Sv28hft"),
    ("json-unquoted-value", '{"access_token": Sv29bare}', "Sv29bare"),
    ("python-dict-password", "{'user': 'bob', 'password': 'Sv30dict'}", "Sv30dict"),
    ("yaml-api_key", "engine: vllm\napi_key: Sv31yaml\nport: 8000", "Sv31yaml"),
    ("yaml-indented-client_secret", "auth:\n  client_secret: Sv32ind\n", "Sv32ind"),
    ("yaml-list-access_token", "- access_token: Sv33list", "Sv33list"),
    ("yaml-flow", "{passwd: Sv34flow, port: 1}", "Sv34flow"),
    ("yaml-quoted-secret", 'secret: "Sv35quoted"  # from the vault', "Sv35quoted"),
    ("toml-token", 'token = "Sv36toml"', "Sv36toml"),
    ("python-kwarg", 'OpenAI(base_url=u, api_key="Sv37kw")', "Sv37kw"),
    ("authorization-bearer", "curl -H 'Authorization: Bearer Sv38bear.x' http://h/v1", "Sv38bear.x"),
    ("authorization-basic", 'curl -H "Authorization: Basic U3YzOWJhc2ljOnB3" http://h', "U3YzOWJhc2ljOnB3"),
    ("authorization-json", '{"Authorization": "Bearer Sv40hdr"}', "Sv40hdr"),
    ("authorization-raw", "Authorization: Sv41raw", "Sv41raw"),
    ("x-api-key-header", "curl -H 'x-api-key: Sv42xak' http://h", "Sv42xak"),
    ("api-key-header", 'curl --header "api-key: Sv43azure" https://x.openai.azure.com', "Sv43azure"),
    ("x-auth-token-header", "X-Auth-Token: Sv44auth", "Sv44auth"),
    ("bare-bearer", "the proxy sent Bearer Sv45bare9 upstream", "Sv45bare9"),
    ("url-password", "--base-url https://bob:Sv46url@api.example.com/v1", "Sv46url"),
    ("url-password-git", "git clone https://oauth2:Sv47git@gitlab.example.com/x.git", "Sv47git"),
    ("url-query-key", "http://h:8000/v1/models?api_key=Sv48q&x=1", "Sv48q"),
    ("curl-user", "curl -u admin:Sv49cu http://h/metrics", "Sv49cu"),
    ("openai-sk", "error: invalid key sk-Sv50aaaaaaaaaaaaaaaaaaaa", "sk-Sv50aaaaaaaaaaaaaaaaaaaa"),
    ("openai-sk-proj", "key sk-proj-Sv51_bbbbbbbbbbbbbbbb-cc in prose", "sk-proj-Sv51_bbbbbbbbbbbbbbbb-cc"),
    ("anthropic-sk-ant", "x sk-ant-api03-Sv52cccccccccccccccc y", "sk-ant-api03-Sv52cccccccccccccccc"),
    ("hf-shape", "downloaded with hf_Sv53dddddddddddddddddddddd today", "hf_Sv53dddddddddddddddddddddd"),
    ("github-shape", "ghp_Sv54eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "ghp_Sv54eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee"),
    ("aws-key-id", "id AKIASV55FFFFFFFFFFFF used", "AKIASV55FFFFFFFFFFFF"),
    ("google-shape", "AIzaSv56ggggggggggggggggggggggggggggggg", "AIzaSv56ggggggggggggggggggggggggggggggg"),
    ("nvidia-shape", "NGC nvapi-Sv57hhhhhhhhhhhhhhhhhhhh", "nvapi-Sv57hhhhhhhhhhhhhhhhhhhh"),
    ("jwt", "cookie eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJTdjU4In0.Sv58sig", "eyJhbGciOiJIUzI1NiJ9"),
    ("private-key-block",
     "-----BEGIN OPENSSH PRIVATE KEY-----\nSv59block\n-----END OPENSSH PRIVATE KEY-----", "Sv59block"),
    ("key-shape-after-flag", "--api-key sk-Sv60iiiiiiiiiiiiiiiiiiii", "sk-Sv60iiiiiiiiiiiiiiiiiiii"),
]

# (probe id, text, the run's own secret): the exact value wherever it appears.
OWN_KEY_PROBES = [
    ("in-prose", "the server said Sv70-own-key was not accepted", "Sv70-own-key"),
    ("glued-in-a-word", "prefixSv71-own-key-long-enoughsuffix", "Sv71-own-key-long-enough"),
    ("url-encoded", "GET /v1/models?k=Sv72%2Bown%2Fkey%3D%3D", "Sv72+own/key=="),
    ("in-a-path", "cannot read /home/u/Sv73-ownkey/cfg.json", "Sv73-ownkey"),
    ("json-escaped-error", '{"detail": "bad key \\"Sv74-ownkey\\""}', "Sv74-ownkey"),
    ("engine-build", "docker run -e MY_SETTING=Sv75-ownkey img", "Sv75-ownkey"),
    ("short-whole-word", "401 for key Sv76x from client", "Sv76x"),
    ("surrounding-space", "the key Sv77-ownkey leaked", "  Sv77-ownkey\n"),
    ("after-an-ordinary-flag", "serve --served-model-name Sv78-ownkey", "Sv78-ownkey"),
]

# Ordinary prose and command lines: byte-identical after redaction.
PROSE = [
    "pass --api-key or set OPENAI_API_KEY",
    "the key was wrong",
    "token counts",
    "max_tokens: 4096",
    "--max-tokens 4096",
    "keyboard",
    "tokenizer",
    "password reset flow",
    "Password: see the operator's notes",
    "the --token flag is optional",
    "use -k to keep the cache; --api-key is required when the server has one",
    "--api-key <redacted> --port 8000",
    "vllm serve m --api-key $VLLM_API_KEY --host 0.0.0.0",
    "vllm serve m --api-key ${HF_TOKEN} --port 1",
    "vllm serve m --api-key --port 8000",
    "curl -k https://localhost:8000/v1/models",
    "sort -k 2 results.txt",
    "docker run -e HF_TOKEN -e MAX_JOBS=2 img",
    "TOKENIZERS_PARALLELISM=false MAX_JOBS=2 VLLM_USE_V1=1",
    "--max-num-batched-tokens 16384 --num-speculative-tokens 7 --top-k 50",
    "--tokenizer-mode auto --tokenizer Qwen/Qwen3-4B --skip-tokenizer-init",
    "--bos-token '<s>' --eos-token </s> --ssl-keyfile key.pem",
    "key=value pairs, key: value",
    "a 299-token vocabulary, max-tokens 4096, the key-value cache",
    '{"method":"dflash","num_speculative_tokens":7}',
    '{"token": {"id": 5, "text": "Hi"}, "usage": {"completion_tokens": 16}}',
    "eos_token_id: 2\nbos_token: <s>\ncache_key: prefix",
    "time-to-first-token: 56 ms; prompt_tokens=1024 completion_tokens=16",
    "Bearer tokens go in the Authorization header",
    "http://127.0.0.1:8000/v1 and http://host:8000 (mail bob@example.com)",
    "ssh git@github.com; docker run -u 1000:1000 img",
    "sk-learn-compatible-models, task-specific, hf_transfer, disk-cache",
    "KV cache: 163,840 tokens; 251K context; Requests queued at 64",
    "| Sustained decode | 8K | 1 | Valid | 203.9 | 208.2 | 56 ms | 4.8 ms | 1.0 |",
]


def _seed_launch_commands() -> list[str]:
    """The launch commands of the published seed pages (already redacted there)."""
    found = []
    for path in sorted(SEEDS.glob("*.txt")):
        lines = path.read_text(encoding="utf-8").splitlines()
        found.append(lines[lines.index("Launch command") + 1])
    return found


@pytest.mark.parametrize(("text", "secret"), [p[1:] for p in PROBES], ids=[p[0] for p in PROBES])
def test_probe_secret_vanishes(text: str, secret: str) -> None:
    out = redact(text)
    assert secret not in out, out
    assert REDACTED in out
    assert redact(out) == out  # idempotent: redacting twice changes nothing more


WHOLE = {"private-key-block", "jwt"}  # these go whole: the secret is only part of them


@pytest.mark.parametrize(("pid", "text", "secret"), PROBES, ids=[p[0] for p in PROBES])
def test_probe_keeps_the_words_around_the_secret(pid: str, text: str, secret: str) -> None:
    """Only the secret goes: the text before and after it comes back as it was."""
    out = redact(text)
    before, _, after = text.partition(secret)
    if pid not in WHOLE:
        assert out.startswith(before) and out.endswith(after), out


def test_probe_table_is_large_and_distinct() -> None:
    assert len({p[0] for p in PROBES}) == len(PROBES) >= 30
    assert len({p[2] for p in PROBES}) == len(PROBES)


@pytest.mark.parametrize(("text", "secret"), [p[1:] for p in OWN_KEY_PROBES],
                         ids=[p[0] for p in OWN_KEY_PROBES])
def test_the_runs_own_key_vanishes_wherever_it_is(text: str, secret: str) -> None:
    out = redact(text, ["", secret])
    assert secret.strip() not in out and REDACTED in out, out


@pytest.mark.parametrize("text", PROSE + _seed_launch_commands())
def test_prose_and_ordinary_commands_are_untouched(text: str) -> None:
    assert redact(text) == text


def test_seed_commands_are_in_the_prose_table() -> None:
    commands = _seed_launch_commands()
    assert len(commands) == 3 and all("--api-key <redacted>" in c for c in commands)


def test_short_literal_secrets() -> None:
    """4-7 characters: whole words only; under 4: not searched for (a key "a"
    would eat prose), the shapes still apply."""
    assert redact("tested the test suite", ["test"]) == f"tested the {REDACTED} suite"
    assert redact("a cat sat", ["a"]) == "a cat sat"
    assert redact("--api-key ab", ["ab"]) == f"--api-key {REDACTED}"
    assert redact("xSv80-long-secretx", ["Sv80-long-secret"]) == f"x{REDACTED}x"


def test_longest_secret_first() -> None:
    out = redact("k=Sv81-key-and-more", ["Sv81-key", "Sv81-key-and-more"])
    assert "and-more" not in out and "Sv81" not in out


def test_flag_followed_by_a_word_of_prose_or_a_flag() -> None:
    """The documented rule: a space-separated value is left when it cannot be
    a key (another flag, a placeholder, a function word); after "=" it is
    always taken."""
    assert redact("set --api-key to your key") == "set --api-key to your key"
    assert redact("--api-key=or") == f"--api-key={REDACTED}"
    assert redact("--api-key --hf-token Sv82") == f"--api-key --hf-token {REDACTED}"
    assert redact("--verbose --api-key Sv83 --port 1") == f"--verbose --api-key {REDACTED} --port 1"


@pytest.mark.parametrize(("name", "secret"), [
    ("api_key", True), ("API_KEY", True), ("x-api-key", True), ("apiKey", True),
    ("HF_TOKEN", True), ("hfToken", True), ("access_token", True), ("token", True),
    ("client_secret", True), ("PGPASSWORD", True), ("passwd", True), ("api-keys", True),
    ("key", False), ("max_tokens", False), ("tokenizer", False), ("keyboard", False),
    ("bos_token", False), ("eos-token", False), ("sort_key", False), ("key_value", False),
    ("monkey", False), ("num_speculative_tokens", False), ("keys", False),
])
def test_secret_names(name: str, secret: bool) -> None:
    assert is_secret_name(name) is secret
    assert is_secret_name("key", bare_key=True)


# -- nested data and URLs ------------------------------------------------------


def test_redact_tree_reaches_every_field() -> None:
    key = "Sv90-run-key-123"
    card = {
        "engine": {"name": "vllm", "build": f"docker run -e VLLM_API_KEY={key} --api-key {key}",
                   "api_key": "plainSv91"},
        "hardware": {"gpu_count": 8, "notes": [f"started by {key}", ("t", f"x {key}")]},
        "notes": "curl -H 'x-api-key: Sv92'",
        "env": {"HF_TOKEN": "Sv93a", "api_keys": ["Sv93b", "Sv93c"], "MAX_JOBS": "2"},
    }
    out = redact_tree(card, [key])
    blob = yaml.safe_dump(out)
    for secret in (key, "plainSv91", "Sv92", "Sv93a", "Sv93b", "Sv93c"):
        assert secret not in blob
    assert out["hardware"]["gpu_count"] == 8 and out["engine"]["name"] == "vllm"
    assert out["env"]["MAX_JOBS"] == "2"
    assert out["engine"]["build"] == f"docker run -e VLLM_API_KEY={REDACTED} --api-key {REDACTED}"
    assert key in card["engine"]["build"]  # a copy: the caller's data is not changed


def test_redact_tree_on_dataclasses_and_named_tuples() -> None:
    engine = Engine(name="vllm", build="--hf-token Sv93", commit="abc")
    out = redact_tree(engine)
    assert isinstance(out, Engine) and out.build == f"--hf-token {REDACTED}" and out.commit == "abc"
    assert engine.build == "--hf-token Sv93"
    pair = namedtuple("pair", "a b")("Sv94x", 3)
    assert redact_tree(pair, ["Sv94x"]) == pair._replace(a=REDACTED)
    assert dataclasses.is_dataclass(redact_tree(engine))


@pytest.mark.parametrize(("url", "secrets", "printed"), [
    ("http://127.0.0.1:8000/v1", [], "http://127.0.0.1:8000/v1"),
    ("https://bob:Sv95pw@api.example.com/v1", ["Sv95pw"], f"https://bob:{REDACTED}@api.example.com/v1"),
    ("https://bob:p%40Sv96@h/v1", ["p%40Sv96", "p@Sv96"], f"https://bob:{REDACTED}@h/v1"),
    ("https://bob:p@Sv97@h/v1", ["p@Sv97"], f"https://bob:{REDACTED}@h/v1"),
    ("https://Sv98token@h/v1", ["Sv98token"], f"https://{REDACTED}@h/v1"),
    ("https://abc@h/v1", ["abc"], f"https://{REDACTED}@h/v1"),  # too short for a literal
    ("https://u:pw@h/v1", ["pw"], f"https://u:{REDACTED}@h/v1"),
    ("http://h/v1?api_key=Sv99q&model=m", ["Sv99q"], f"http://h/v1?api_key={REDACTED}&model=m"),
    ("not a url", [], "not a url"),
    ("http://[::1", [], "http://[::1"),
])
def test_url_secrets_and_redact_url(url: str, secrets: list[str], printed: str) -> None:
    assert url_secrets(url) == secrets
    assert redact_url(url) == printed
    for secret in secrets:  # as literal secrets of the run (from 4 characters)
        assert len(secret) < 4 or secret not in redact(url, url_secrets(url))


# -- end to end ----------------------------------------------------------------

IMPORT_SECRETS = ("Sv100-flagkey", "Sv101-envkey", "dXNlcjpTdjEwMg==", "Sv103-urlpw",
                  "Sv104-extra-note")


def _page_with_secrets(tmp_path: Path) -> Path:
    lines = QWEN.read_text(encoding="utf-8").splitlines()
    at = lines.index("Launch command") + 1
    lines[at] = lines[at].replace(
        "--api-key <redacted>",
        "--api-key Sv100-flagkey -e VLLM_API_KEY=Sv101-envkey "
        "--header 'Authorization: Basic dXNlcjpTdjEwMg==' --url https://u:Sv103-urlpw@h",
    )
    hw = lines.index("Hardware") + 1
    lines[hw:hw] = ["- Remark", "- started with HF_TOKEN=Sv104-extra-note"]
    page = tmp_path / "page.txt"
    page.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return page


def _files_hold(root: Path, secrets: tuple[str, ...]) -> list[str]:
    return [f"{path}: {s}" for path in root.rglob("*") if path.is_file()
            for s in secrets if s.encode() in path.read_bytes()]


def test_bench_import_writes_no_key(tmp_path) -> None:
    page = _page_with_secrets(tmp_path)
    out = tmp_path / "data"
    res = run_cli("bench", "import", str(page), "--out", str(out))
    assert res.returncode == 0, res.stderr
    for secret in IMPORT_SECRETS:
        assert secret not in res.stdout + res.stderr
    assert _files_hold(out, IMPORT_SECRETS) == []
    (run_dir,) = [p for p in out.iterdir() if p.is_dir()]
    info = read_run(run_dir).info
    assert info.launch_command.count(REDACTED) == 4, info.launch_command
    assert "--max-model-len 262144" in info.launch_command  # the rest is kept
    assert f"HF_TOKEN={REDACTED}" in info.notes


def test_bench_import_error_quoting_the_page_is_redacted(tmp_path) -> None:
    text = QWEN.read_text(encoding="utf-8").replace(
        "| Sustained decode | 8K | 1 | Valid |", "| Sustained decode | 8K | 1 | token=Sv105-st |", 1)
    page = tmp_path / "bad.txt"
    page.write_text(text, encoding="utf-8")
    res = run_cli("bench", "import", str(page), "--out", str(tmp_path / "data"))
    assert res.returncode == 1 and "unknown status" in res.stderr, res.stderr
    assert "Sv105-st" not in res.stderr and REDACTED in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


FAST = ["--duration", "1", "--warmup-stable", "0.3", "--no-prefill", "--server-wait", "2",
        "--max-output", "200", "--contexts", "128", "--concurrency", "1"]


def test_bench_run_card_secrets_reach_no_file_and_no_page(refserver, tmp_path) -> None:
    """The run's key in every run-card field: nothing of it in run.yaml, the
    raw files, the terminal or the built site."""
    key = "Sv110-run-key-0123456789"
    srv = refserver(api_key=key, tokens_per_s=200)
    card = {
        "submitter": f"ops (key {key})",
        "hardware": {"cpu": f"host with OPENAI_API_KEY={key}"},
        "engine": {"name": "vllm", "build": f"docker run -e VLLM_API_KEY={key} vllm --api-key {key}",
                   "repository": f"https://ci:{key}@git.example.com/vllm"},
        "model": {"repository_id": f"org/m?token={key}"},
        "launch_command": f"vllm serve m -k {key} -H 'x-api-key: {key}'",
        "notes": f'Run with {{"api_key": "{key}"}} and Authorization: Basic {key}.',
    }
    card_path = tmp_path / "card.yaml"
    card_path.write_text(yaml.safe_dump(card), encoding="utf-8")
    out = tmp_path / "data" / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--api-key", key, "--out", str(out),
                  "--run-card", str(card_path), *FAST)
    assert key not in res.stdout + res.stderr
    assert res.returncode == 0, res.stderr[-2000:]
    assert _files_hold(out, (key,)) == []
    info = read_run(out).info
    assert REDACTED in info.engine.build and "docker run -e VLLM_API_KEY=" in info.engine.build
    site = tmp_path / "site"
    res = run_cli("build-site", "--data", str(out.parent), "--out", str(site))
    assert res.returncode == 0, res.stderr[-2000:]
    assert _files_hold(site, (key,)) == []
    assert key not in res.stdout + res.stderr


def _run_and_site(srv, key: str, tmp_path: Path, *extra: str) -> tuple[Path, Path, str]:
    """`bench run` with --api-key key into the default runs/<run id> (named
    after the served model), then `build-site` over it: (run dir, site,
    everything both printed)."""
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--api-key", key, *FAST, *extra,
                  cwd=tmp_path)
    assert res.returncode in (0, 3), res.stderr[-2000:]
    printed = res.stdout + res.stderr
    (out,) = (tmp_path / "runs").iterdir()
    site = tmp_path / "site"
    res = run_cli("build-site", "--data", str(out.parent), "--out", str(site))
    assert res.returncode == 0, res.stderr[-2000:]
    return out, site, printed + res.stdout + res.stderr


def test_served_model_name_holding_the_key_reaches_no_file_page_or_terminal(
        refserver, tmp_path) -> None:
    """The audit's case: the served name `m-<key>` reached run.yaml,
    server_metrics.parquet (its labels) and every page, while the launch
    command beside it was redacted; the run directory is named after it."""
    key = "Sv120-served-key-0123456789"
    srv = refserver(api_key=key, model=f"m-{key}", tokens_per_s=200)
    out, site, printed = _run_and_site(srv, key, tmp_path)
    assert key not in printed and f"m-{REDACTED}" in printed
    assert _files_hold(out, (key,)) == [] and _files_hold(site, (key,)) == []
    assert key.lower() not in out.name.lower(), out.name
    run = read_run(out)
    assert run.info.model.served_name == f"m-{REDACTED}"
    labels = set(run.server_metrics.column("labels").to_pylist())
    assert any(f"m-{REDACTED}" in text for text in labels), labels


def test_run_whose_served_name_holds_the_key_can_be_resumed(refserver, tmp_path) -> None:
    """run.yaml keeps `m-<redacted>`: --resume still finds the served model,
    with --model given as the server names it or without it."""
    key = "Sv121-resume-key-0123456789"
    srv = refserver(api_key=key, model=f"m-{key}", tokens_per_s=200)
    out = tmp_path / "run"
    base = ["bench", "run", "--base-url", srv.base_url, "--api-key", key]
    res = run_cli(*base, "--out", str(out), *FAST)
    assert res.returncode == 0, res.stderr[-2000:]
    for extra in (["--concurrency", "2"], ["--concurrency", "3", "--model", f"m-{key}"]):
        res = run_cli(*base, "--resume", str(out), "--warmup-stable", "0.3", *extra)
        assert res.returncode == 0, res.stderr[-2000:]
        assert key not in res.stdout + res.stderr
    assert sorted(read_run(out).cells.column("concurrency").to_pylist()) == [1, 2, 3]
    assert _files_hold(out, (key,)) == []


def test_server_answer_text_quoting_the_key_reaches_no_file(refserver, tmp_path) -> None:
    """A server whose streamed answer holds the key (the kept answer tail,
    which no earlier step redacts): redacted where the rows enter the run
    directory."""
    key = "Sv122-answer-key-0123456789"
    chunk = {"choices": [{"index": 0, "delta": {"content": f"w1 m-{key} w2 "}}]}
    body = f"data: {json.dumps(chunk)}\n\ndata: [DONE]\n\n"
    srv = refserver(endpoint_answers={"/v1/chat/completions": {
        "status": 200, "body": body, "content_type": "text/event-stream"}})
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", srv.base_url, "--api-key", key, "--out", str(out),
                  *FAST, "--warmup-timeout", "2")
    assert res.returncode in (0, 3), res.stderr[-2000:]
    assert key not in res.stdout + res.stderr
    assert _files_hold(out, (key,)) == []
    tails = {t for t in read_run(out).requests.column("content_tail").to_pylist() if t}
    assert tails and all(f"m-{REDACTED}" in t for t in tails), tails


def test_base_url_password_is_never_printed_or_written(refserver, tmp_path) -> None:
    srv = refserver(tokens_per_s=200)
    secret = "Sv111-url-pass"
    base = srv.base_url.replace("http://", f"http://bench:{secret}@")
    out = tmp_path / "run"
    res = run_cli("bench", "run", "--base-url", base, "--out", str(out), *FAST)
    assert secret not in res.stdout + res.stderr
    assert res.returncode == 0, res.stderr[-2000:]
    assert _files_hold(out, (secret,)) == []


def test_run_secrets_come_from_credential_names_only(monkeypatch) -> None:
    """The environment's credentials are the run's secrets; a path in a variable
    merely containing TOKEN (TOKENIZER_PATH) must not be erased everywhere."""
    from bench.run.runner import RunOptions, secrets_of

    monkeypatch.setenv("HF_TOKEN", "hf-env-secret-value-123")
    monkeypatch.setenv("TOKENIZER_PATH", "/models/tokenizer-dir")
    found = secrets_of(RunOptions(base_url="http://u:url-pass-9876@h:8000"))
    assert "hf-env-secret-value-123" in found and "url-pass-9876" in found
    assert "/models/tokenizer-dir" not in found
