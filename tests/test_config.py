"""Behaviour of the configuration layer: what an operator types must end up in the job, and
anything wrong must fail with the key and the file named."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from kraftlake.metadata import config as cfg
from kraftlake.metadata.config import Config, ConfigError, ConfigWarning, load_config, parse_properties
from kraftlake.cli.config import add_common_arguments, config_from_args

REPO_ROOT = Path(__file__).resolve().parent.parent
CONF = REPO_ROOT / "conf" / "kraftlake.properties"
PACKAGED = REPO_ROOT / "lib" / "kraftlake" / "defaults.properties"


def _parse_args(*argv: str) -> argparse.Namespace:
    return add_common_arguments(argparse.ArgumentParser()).parse_args(list(argv))


# -- properties parser ----------------------------------------------------------------------


def test_parser_separators_comments_and_blank_lines() -> None:
    text = "\n".join([
        "# a comment",
        "! another comment",
        "",
        "   ",
        "a=1",
        "b: 2",
        "c 3",
        "  d  =  spaced value  ",
        "e=",
        "f",
        "url=http://host:8080/x=y",
        "  # indented comment",
    ])
    assert parse_properties(text) == {
        "a": "1",
        "b": "2",
        "c": "3",
        "d": "spaced value",
        "e": "",
        "f": "",
        "url": "http://host:8080/x=y",
    }


def test_parser_line_continuations() -> None:
    text = "list=a, \\\n     b, \\\n     c\nnext=1\n"
    assert parse_properties(text) == {"list": "a, b, c", "next": "1"}


def test_parser_even_backslashes_do_not_continue() -> None:
    # "\\\\" at the end is an escaped backslash, not a continuation.
    text = "dir=C:\\\\\nother=x\n"
    assert parse_properties(text) == {"dir": "C:\\", "other": "x"}


def test_parser_comment_line_is_never_continued() -> None:
    text = "# comment \\\nkey=value\n"
    assert parse_properties(text) == {"key": "value"}


def test_parser_continuation_at_end_of_file() -> None:
    assert parse_properties("k=v\\") == {"k": "v"}


def test_parser_escapes_and_later_duplicates_win() -> None:
    text = "a\\=b=1\nkey\\ with\\ spaces=x\\ty\\u0041\nk=first\nk=second\n"
    assert parse_properties(text) == {"a=b": "1", "key with spaces": "x\tyA", "k": "second"}


def test_parser_rejects_value_without_key() -> None:
    with pytest.raises(ConfigError, match=r"site\.properties:2"):
        parse_properties("ok=1\n=oops\n", "site.properties")


def test_parser_rejects_bad_unicode_escape() -> None:
    with pytest.raises(ConfigError, match="uXXXX"):
        parse_properties("k=\\u12\n")


# -- shipped defaults ---------------------------------------------------------------------


def test_packaged_defaults_are_byte_identical_to_conf() -> None:
    assert PACKAGED.read_bytes() == CONF.read_bytes(), (
        "lib/kraftlake/defaults.properties must be a copy of conf/kraftlake.properties: "
        "cp conf/kraftlake.properties lib/kraftlake/defaults.properties"
    )


def test_defaults_have_kafka_names_and_values() -> None:
    c = load_config()
    assert c.source("kraftlake.shards") == str(CONF)
    assert c.get_int("broker.session.timeout.ms") == 9000
    assert c.get_int("broker.heartbeat.interval.ms") == 2000
    assert c.get_bool("unclean.leader.election.enable") is False
    assert c.get_bool("auto.leader.rebalance.enable") is True
    assert c.get_int("leader.imbalance.check.interval.seconds") == 300
    assert c.get_int("leader.imbalance.per.broker.percentage") == 10
    assert c.get_int("min.insync.replicas") == 1
    assert c.get_int("default.replication.factor") == 1
    assert c.get_int("num.partitions") == 1
    assert c.get_int("controller.quorum.election.timeout.ms") == 1000
    assert c.get_int("controller.quorum.election.backoff.max.ms") == 1000
    assert c.get_int("controller.quorum.fetch.timeout.ms") == 2000
    assert c.get_int("controller.quorum.append.linger.ms") == 25
    assert c.get_str("kraftlake.engine") == "auto"
    assert c.get_int("kraftlake.shards") == 4
    assert c.get_bool("kraftlake.strict") is False
    assert c.get_int("kraftlake.ingest.batch.records") == 50000
    spark = dict(c.subset("spark."))
    assert spark.pop("spark.redaction.regex")  # what it covers: test_datasource
    assert spark == {
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.session.timeZone": "UTC",
        "spark.ui.enabled": "false",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
    }


def test_packaged_defaults_used_without_a_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cfg, "default_properties_path", lambda: None)
    c = load_config()
    assert "packaged defaults" in c.source("kraftlake.shards")
    assert dict(c) == dict(parse_properties(CONF.read_text(encoding="utf-8")))


def test_packaged_defaults_readable_from_a_zip(tmp_path: Path) -> None:
    """spark-submit ships the library as build/kraftlake.zip: the fallback must work from there."""
    import zipfile

    archive = tmp_path / "kraftlake.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        lib = REPO_ROOT / "lib"
        for f in sorted((lib / "kraftlake").rglob("*")):
            if f.is_file() and f.suffix in (".py", ".properties") and "__pycache__" not in f.parts:
                zf.write(f, f.relative_to(lib).as_posix())
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]);"
        "import kraftlake.metadata.config as c; c.default_properties_path = lambda: None;"
        "cf = c.load_config(); assert '.zip' in c.__file__, c.__file__;"
        "print(cf.get_int('kraftlake.shards'), cf.source('kraftlake.shards'))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(archive)], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": ""}, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("4 kraftlake/defaults.properties")


# -- layering -----------------------------------------------------------------------------


def test_layering_defaults_then_file_then_overrides(tmp_path: Path) -> None:
    site = tmp_path / "site.properties"
    site.write_text("kraftlake.shards=8\nbroker.session.timeout.ms=18000\nspark.sql.shuffle.partitions=64\n")
    c = load_config(site, ["kraftlake.shards=16", "spark.sql.shuffle.partitions = 32", "kraftlake.shards=12"])
    assert c.get_int("kraftlake.shards") == 12  # override beats file; the last override wins
    assert c.source("kraftlake.shards") == "--override"
    assert c.get_int("broker.session.timeout.ms") == 18000  # file beats defaults
    assert c.source("broker.session.timeout.ms") == str(site)
    assert c["spark.sql.shuffle.partitions"] == "32"
    assert c.get_int("broker.heartbeat.interval.ms") == 2000  # untouched default
    assert c.source("broker.heartbeat.interval.ms") == str(CONF)


def test_override_may_contain_equals_signs() -> None:
    c = load_config(None, ["spark.driver.extraJavaOptions=-Da=b -Dc=d"])
    assert c["spark.driver.extraJavaOptions"] == "-Da=b -Dc=d"


@pytest.mark.parametrize("bad", ["no-equals", "=value", "  =x"])
def test_override_without_key_value_is_rejected(bad: str) -> None:
    with pytest.raises(ConfigError, match="KEY=VALUE"):
        load_config(None, [bad])


def test_missing_conf_file_is_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope.properties"
    with pytest.raises(ConfigError, match="nope.properties"):
        load_config(missing, [])


def test_bad_value_in_conf_file_fails_at_load_naming_key_and_file(tmp_path: Path) -> None:
    site = tmp_path / "site.properties"
    site.write_text("kraftlake.shards=four\n")
    with pytest.raises(ConfigError) as e:
        load_config(site, [])
    assert "kraftlake.shards" in str(e.value)
    assert str(site) in str(e.value)
    assert "'four'" in str(e.value)


@pytest.mark.parametrize("override, fragment", [
    ("kraftlake.shards=0", ">= 1"),
    ("kraftlake.strict=yes", "true or false"),
    ("kraftlake.engine=spark", "auto, native, delta-rs"),
    ("kraftlake.ingest.batch.records=1e5", "an integer"),
    ("kraftlake.warehouse=", "a path or URI"),
])
def test_known_settings_are_validated_at_load(override: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment) as e:
        load_config(None, [override])
    assert "--override" in str(e.value)


def test_misspelt_kraftlake_key_warns_with_suggestion() -> None:
    with pytest.warns(ConfigWarning, match="kraftlake.shards"):
        c = load_config(None, ["kraftlake.shard=8"])
    assert c.get_int("kraftlake.shards") == 4


def test_other_keys_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = load_config(None, ["spark.executor.memory=4g", "replica.lag.time.max.ms=30000"])
    assert c["spark.executor.memory"] == "4g"


def test_storage_settings_are_delta_rs_options_and_checkpoints_follow_the_warehouse(tmp_path: Path) -> None:
    from kraftlake.cli.runtime import checkpoint_location, storage_options
    from kraftlake.storage import Warehouse

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # delta-rs checks its own options: no "unknown setting" warning
        c = load_config(None, ["kraftlake.storage.aws_endpoint_url=http://127.0.0.1:9000",
                               "kraftlake.storage.AWS_ALLOW_HTTP=true", "kraftlake.storage.aws_region="])
    assert storage_options(c) == {"aws_endpoint_url": "http://127.0.0.1:9000", "AWS_ALLOW_HTTP": "true"}
    with pytest.warns(ConfigWarning, match="kraftlake.checkpoints"):
        load_config(None, ["kraftlake.checkpoint=/x"])

    on_s3 = Warehouse("s3://bucket/w", engine="delta-rs", storage_options=storage_options(c))
    assert on_s3.storage_options == storage_options(c)
    assert Warehouse(str(tmp_path), engine="delta-rs", storage_options=storage_options(c)).storage_options is None
    # Spark reaches S3 through Hadoop's S3A only; with no session there is no JVM to ask whether it has it
    assert checkpoint_location(c, on_s3, "controller") == "s3a://bucket/w/_checkpoints/controller"
    assert checkpoint_location(c, on_s3, "controller", "s3://other/cp") == "s3a://other/cp"
    elsewhere = c.with_overrides({"kraftlake.checkpoints": str(tmp_path / "cp")})
    assert checkpoint_location(elsewhere, on_s3, "controller") == str(tmp_path / "cp" / "controller")


# -- Config and typed getters -------------------------------------------------------------


def test_config_is_an_immutable_mapping() -> None:
    c = Config({"a": "1"})
    with pytest.raises(TypeError):
        c["a"] = "2"  # type: ignore[index]
    with pytest.raises(AttributeError):
        c.x = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Config({"a": 1})  # type: ignore[dict-item]
    d = c.with_overrides({"a": "2", "b": "3"}, "test")
    assert dict(c) == {"a": "1"}
    assert dict(d) == {"a": "2", "b": "3"}
    assert d.source("b") == "test"
    assert c == {"a": "1"} and hash(c) == hash(Config({"a": "1"}))


def test_typed_getters() -> None:
    c = Config({"i": " 42 ", "neg": "-3", "t": "TRUE", "f": "False", "s": " x ", "e": "native"})
    assert c.get_int("i") == 42
    assert c.get_int("neg") == -3
    assert c.get_bool("t") is True
    assert c.get_bool("f") is False
    assert c.get_str("s") == "x"
    assert c.get_str("e", choices=("native", "delta-rs")) == "native"
    assert c.get_int("absent", 7) == 7
    assert c.get_bool("absent", True) is True
    assert c.get_str("absent", None) is None


def test_typed_getter_errors_name_key_value_and_source(tmp_path: Path) -> None:
    c = Config({"n": "12x", "b": "1", "m": "5"}, {"n": "/etc/site.properties", "b": "--override", "m": "x"})
    with pytest.raises(ConfigError, match=r"n='12x' \(from /etc/site\.properties\): expected an integer"):
        c.get_int("n")
    with pytest.raises(ConfigError, match=r"b='1' \(from --override\): expected true or false"):
        c.get_bool("b")
    with pytest.raises(ConfigError, match=r"m='5' .*>= 10"):
        c.get_int("m", minimum=10)
    with pytest.raises(ConfigError, match="missing setting 'nope'"):
        c.get_str("nope")


def test_get_path_resolves_against_cwd_and_keeps_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    c = Config({
        "rel": "warehouse",
        "abs": "/data/w",
        "home": "~/w",
        "s3": "s3a://bucket/w",
        "file": "file:/data/w",
    })
    assert c.get_path("rel") == str(tmp_path / "warehouse")
    assert c.get_path("abs") == "/data/w"
    assert c.get_path("home") == os.path.join(os.path.expanduser("~"), "w")
    assert c.get_path("s3") == "s3a://bucket/w"
    assert c.get_path("file") == "file:/data/w"


def test_default_warehouse_is_relative_to_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load_config().get_path("kraftlake.warehouse") == str(tmp_path / "warehouse")


# -- command-line arguments ---------------------------------------------------------------


def test_common_arguments_defaults_leave_config_alone() -> None:
    args = _parse_args()
    assert (args.warehouse, args.conf_file, args.override, args.strict, args.engine) == (None, None, [], None, None)
    assert dict(config_from_args(args)) == dict(load_config())


def test_common_arguments_map_to_settings(tmp_path: Path) -> None:
    site = tmp_path / "site.properties"
    site.write_text("kraftlake.engine=native\nkraftlake.shards=8\n")
    args = _parse_args(
        "--warehouse", "/w", "--conf-file", str(site), "--override", "kraftlake.shards=2",
        "--override", "broker.session.timeout.ms=1000", "--strict", "--engine", "delta-rs",
    )
    c = config_from_args(args)
    assert c.get_path("kraftlake.warehouse") == "/w"
    assert c.get_bool("kraftlake.strict") is True
    assert c.get_str("kraftlake.engine") == "delta-rs"  # the flag beats the file
    assert c.get_int("kraftlake.shards") == 2
    assert c.get_int("broker.session.timeout.ms") == 1000


def test_dedicated_flags_win_over_override() -> None:
    args = _parse_args("--override", "kraftlake.warehouse=/from-override", "--warehouse", "/from-flag",
                       "--override", "kraftlake.engine=native")
    c = config_from_args(args)
    assert c.get_path("kraftlake.warehouse") == "/from-flag"
    assert c.get_str("kraftlake.engine") == "native"  # no --engine: the override stands


def test_engine_flag_rejects_unknown_engine(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        _parse_args("--engine", "bogus")
    assert "invalid choice" in capsys.readouterr().err


def test_config_from_args_accepts_namespace_without_common_args() -> None:
    assert config_from_args(argparse.Namespace()).get_int("kraftlake.shards") == 4


# -- import hygiene and the Spark session -------------------------------------------------


def test_config_and_sparkutil_import_without_pyspark() -> None:
    code = (
        "import sys, kraftlake.metadata.config, kraftlake.spark.session;"
        "bad = [m for m in sys.modules if m == 'pyspark' or m.startswith('pyspark.')];"
        "assert not bad, bad"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT / "lib")})
    assert out.returncode == 0, out.stderr


def test_get_spark_leaves_an_active_session_alone(spark) -> None:  # noqa: ANN001
    from kraftlake.spark.session import get_spark

    c = load_config(None, ["spark.sql.shuffle.partitions=99"])
    assert get_spark(c, "ignored") is spark
    assert spark.conf.get("spark.sql.shuffle.partitions") == "2"
    assert spark.range(5).selectExpr("sum(id)").first()[0] == 10
