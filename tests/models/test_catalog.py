"""The catalog (shipped, user overlay, replacement), the data folders, local models and name resolution."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import platformdirs
import pytest

from specchat.errors import NotGGUFError, Remedies, SpecchatError
from specchat.models import catalog as cat
from specchat.models import download

from .support import REPO_ROOT, run_cli, subprocess_env, write_catalog

REQUIRED_PAIRS = {"qwen2.5-1.5b", "qwen2.5-3b", "qwen2.5-7b", "qwen2.5-coder-1.5b", "qwen2.5-coder-7b"}
REQUIRED_PAIRS |= {"llama-3.2-3b", "llama-3.1-8b", "gemma-3-4b"}


def test_shipped_catalog_is_complete_and_well_formed():
    catalog = cat.load_catalog()

    assert set(catalog.pairs) >= REQUIRED_PAIRS and len(catalog.pairs) >= 6
    default = catalog.default_pair
    assert default.name == "qwen2.5-1.5b"
    target, draft = catalog.models[default.target], catalog.models[default.draft]
    assert (target.repo, target.file) == ("Qwen/Qwen2.5-1.5B-Instruct-GGUF", "qwen2.5-1.5b-instruct-q4_k_m.gguf")
    assert (draft.repo, draft.file) == ("Qwen/Qwen2.5-0.5B-Instruct-GGUF", "qwen2.5-0.5b-instruct-q4_k_m.gguf")
    for pair in catalog.pairs.values():
        assert pair.description and pair.license and pair.context_length >= 2048 and 1 <= pair.draft_length <= 16
        assert pair.target in catalog.models and pair.draft in catalog.models and pair.target != pair.draft
    for model in catalog.models.values():
        assert model.file.endswith(".gguf") and "/" in model.repo
        assert model.size and model.size > 100_000_000
        assert model.sha256 and re.fullmatch(r"[0-9a-f]{64}", model.sha256)
        assert model.quantization == "Q4_K_M" and model.license
    # A draft much smaller than its target is the point of speculative decoding.
    for pair in catalog.pairs.values():
        assert catalog.models[pair.draft].size < catalog.models[pair.target].size / 1.5


def test_source_checkout_reads_the_repository_root_catalog():
    where, text = cat.shipped_catalog()
    assert Path(where) == REPO_ROOT / "models.toml"
    assert text == (REPO_ROOT / "models.toml").read_text(encoding="utf-8")


def test_specchat_home_moves_every_folder(specchat_home: Path, monkeypatch):
    assert cat.data_dir() == specchat_home
    assert cat.config_dir() == specchat_home / "config"
    assert cat.cache_dir() == specchat_home / "cache"
    model = cat.load_catalog().models["qwen2.5-0.5b-instruct"]
    assert model.path == specchat_home / "models" / "Qwen--Qwen2.5-0.5B-Instruct-GGUF" / model.file

    monkeypatch.delenv("SPECCHAT_HOME")
    assert cat.data_dir() == Path(platformdirs.user_data_dir("specchat", appauthor=False))
    assert cat.config_dir() == Path(platformdirs.user_config_dir("specchat", appauthor=False))
    assert cat.cache_dir() == Path(platformdirs.user_cache_dir("specchat", appauthor=False))


USER_CATALOG = """
default_pair = "tiny-qwen"

[pairs."tiny-qwen"]
description = "the 0.5B drafting for itself"
target = "qwen2.5-0.5b-instruct"
draft = "qwen2.5-0.5b-instruct"

[pairs."qwen2.5-7b"]
target = "qwen2.5-7b-instruct"
draft = "qwen2.5-0.5b-instruct"
draft_length = 8

[models."qwen2.5-0.5b-instruct"]
repo = "someone/Qwen2.5-0.5B-Instruct-GGUF"
file = "qwen2.5-0.5b-instruct-q8_0.gguf"
"""


def test_user_catalog_adds_and_overrides_entries():
    write_catalog(cat.user_catalog_path(), USER_CATALOG)

    catalog = cat.load_catalog()

    shipped = set(cat.load_catalog(REPO_ROOT / "models.toml").pairs)
    assert set(catalog.pairs) == shipped | {"tiny-qwen"}
    assert catalog.default == "tiny-qwen"
    assert catalog.pairs["qwen2.5-7b"].draft_length == 8
    assert catalog.pairs["qwen2.5-7b"].context_length == cat.DEFAULT_CONTEXT_LENGTH  # a whole entry is replaced
    assert catalog.models["qwen2.5-0.5b-instruct"].repo == "someone/Qwen2.5-0.5B-Instruct-GGUF"
    assert catalog.models["qwen2.5-0.5b-instruct"].sha256 is None
    assert catalog.sources[-1] == str(cat.user_catalog_path())


def test_specchat_catalog_and_the_catalog_flag_replace_the_catalog(tmp_path: Path, monkeypatch, capsys):
    write_catalog(cat.user_catalog_path(), USER_CATALOG)  # ignored: a replacement replaces both
    only = write_catalog(
        tmp_path / "only.toml",
        """default_pair = "p"
[pairs.p]
target = "a"
draft = "b"
[models.a]
repo = "x/a"
file = "a.gguf"
[models.b]
repo = "x/b"
file = "b.gguf"
""",
    )
    monkeypatch.setenv("SPECCHAT_CATALOG", str(only))
    assert set(cat.load_catalog().pairs) == {"p"}

    monkeypatch.delenv("SPECCHAT_CATALOG")
    assert run_cli("--catalog", str(only), "list", "--json") == 0
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["pairs"]] == ["p"]
    assert run_cli("list", "--json", "--catalog", str(only)) == 0
    assert [p["name"] for p in json.loads(capsys.readouterr().out)["pairs"]] == ["p"]


BAD_CATALOGS = {
    "not toml": ("default_pair = ", "is not valid TOML"),
    "unknown key": ('default_pair = "p"\n[pairs.p]\ntarget = "m"\ndraft = "m"\ncontext = 1\n', "unknown key 'context'"),
    "unknown model": ('default_pair = "p"\n[pairs.p]\ntarget = "m"\ndraft = "m"\n', "neither a catalog model"),
    "bad sha": ('[models.m]\nrepo = "a/b"\nfile = "m.gguf"\nsha256 = "abc"\n', "sha256 must be 64 hexadecimal"),
    "bad repo": ('[models.m]\nrepo = "no-owner"\nfile = "m.gguf"\n', "not a Hugging Face repo id"),
    "escaping file": ('[models.m]\nrepo = "a/b"\nfile = "../m.gguf"\n', "repo-relative path of a .gguf"),
    "no default": ('[models.m]\nrepo = "a/b"\nfile = "m.gguf"\n', "no default_pair is set"),
    "bad default": ('default_pair = "zz"\n[models.m]\nrepo = "a/b"\nfile = "m.gguf"\n', "is not one of the"),
    "bad size": ('[models.m]\nrepo = "a/b"\nfile = "m.gguf"\nsize = -3\n', "positive whole number"),
}


@pytest.mark.parametrize("case", sorted(BAD_CATALOGS))
def test_a_broken_catalog_gives_one_clear_sentence(tmp_path: Path, case: str, capsys):
    text, expected = BAD_CATALOGS[case]
    path = write_catalog(tmp_path / "bad.toml", text)

    with pytest.raises(cat.CatalogError) as err:
        cat.load_catalog(path)
    assert expected in str(err.value) and str(path) in str(err.value) and "\n" not in str(err.value)

    assert run_cli("--catalog", str(path), "list") == 1
    assert capsys.readouterr().err.startswith(f"error: {path}")


def test_resolve_model_accepts_paths_and_names_and_explains_the_rest(tmp_path: Path, smollm: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert cat.resolve_model(str(smollm)) == smollm.resolve()
    with pytest.raises(cat.NotInstalledError, match="run `specchat models download qwen2.5-0.5b-instruct`"):
        cat.resolve_model("qwen2.5-0.5b-instruct")
    with pytest.raises(cat.UnknownNameError, match="no such model file"):
        cat.resolve_model("models/nothing-here.gguf")
    with pytest.raises(cat.UnknownNameError, match="unknown model 'nope'"):
        cat.resolve_model("nope")
    with pytest.raises(cat.UnknownNameError, match="is a pair"):
        cat.resolve_model("qwen2.5-1.5b")
    with pytest.raises(cat.UnknownNameError, match=f"^{tmp_path} is a folder, not a model file"):
        cat.resolve_model(str(tmp_path))


def test_a_broken_user_catalog_stops_no_one_who_gives_files(tmp_path: Path, smollm: Path):
    write_catalog(cat.user_catalog_path(), "this is [not toml\n")
    assert cat.resolve_model(str(smollm)) == smollm.resolve()
    with pytest.raises(cat.UnknownNameError, match="no such model file"):
        cat.resolve_model(str(tmp_path / "gone.gguf"))
    with pytest.raises(cat.UnknownNameError, match="is a folder"):
        cat.resolve_model(str(tmp_path))
    # A name needs the catalog, which says what is wrong with it.
    with pytest.raises(cat.CatalogError, match="is not valid TOML"):
        cat.resolve_model("qwen2.5-0.5b-instruct")
    # The app lists the shipped catalog meanwhile, and says why.
    shipped, unusable = cat.load_catalog_or_shipped()
    assert REQUIRED_PAIRS <= set(shipped.pairs)
    why = str(unusable)
    assert str(cat.user_catalog_path()) in why and "is not valid TOML" in why and "\n" not in why


def test_models_list_with_a_broken_user_catalog_is_one_line(specchat_home: Path):
    path = write_catalog(cat.user_catalog_path(), "this is [not toml\n")
    env = subprocess_env(SPECCHAT_HOME=str(specchat_home))
    done = subprocess.run([sys.executable, "-m", "specchat", "models", "list"], env=env, capture_output=True, text=True)
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith(f"error: {path} is not valid TOML") and done.stderr.count("\n") == 1, done.stderr


def test_resolve_pair_names_the_download_command():
    with pytest.raises(cat.NotInstalledError, match="run `specchat models download qwen2.5-1.5b`"):
        cat.resolve_pair("qwen2.5-1.5b")
    with pytest.raises(cat.UnknownNameError, match="specchat models download NAME"):
        cat.resolve_pair("no-such-pair")
    assert cat.installed_default_pair() is None


def test_local_models_are_registered_in_place_and_pair_up_with_anything(qwen_pair, tmp_path: Path, capsys):
    target, draft = qwen_pair

    assert run_cli("add", str(target), "--name", "my-coder") == 0
    assert "added my-coder" in capsys.readouterr().out
    name, path = cat.add_local_model(draft)  # default name: the file name without .gguf
    assert (name, path) == (draft.stem, draft.resolve())
    assert cat.resolve_model("my-coder") == target.resolve()
    assert cat.local_models() == {"my-coder": target.resolve(), draft.stem: draft.resolve()}
    assert not any(cat.models_dir().rglob("*.gguf"))  # registered, not copied

    # A pair of two local models, defined in the user catalog, resolves like a catalog pair and checks by name.
    write_catalog(
        cat.user_catalog_path(),
        f'[pairs.mine]\ntarget = "my-coder"\ndraft = "{draft.stem}"\n',
    )
    assert cat.resolve_pair("mine") == (target.resolve(), draft.resolve())
    assert run_cli("check", "my-coder", draft.stem) == 0
    assert "compatible" in capsys.readouterr().out

    cat.user_catalog_path().unlink()  # a model a pair uses is not forgotten (see the test below)
    assert run_cli("remove", "my-coder") == 0
    assert "left where it is" in capsys.readouterr().out
    assert target.is_file() and "my-coder" not in cat.local_models()


def test_adding_bad_local_models_is_refused(tmp_path: Path, smollm: Path, capsys):
    text = tmp_path / "notes.gguf"
    text.write_text("not a model", encoding="utf-8")
    with pytest.raises(NotGGUFError):
        cat.add_local_model(text)
    with pytest.raises(SpecchatError, match="already a catalog name"):
        cat.add_local_model(smollm, name="qwen2.5-1.5b")
    cat.add_local_model(smollm, name="smol")
    assert cat.add_local_model(smollm, name="smol") == ("smol", smollm.resolve())  # the same again is fine
    other = tmp_path / "other.gguf"
    shutil.copy(smollm, other)
    with pytest.raises(SpecchatError, match="already names"):
        cat.add_local_model(other, name="smol")
    # The command line says how to give another name by its flag (the app's page by its field).
    assert run_cli("add", str(smollm), "--name", "qwen2.5-1.5b") == 1
    assert capsys.readouterr().err == "error: 'qwen2.5-1.5b' is already a catalog name; choose another with --name\n"
    assert run_cli("add", str(other), "--name", "smol") == 1
    assert capsys.readouterr().err == (
        f"error: 'smol' already names {smollm.resolve()}; remove it first or choose another with --name\n"
    )
    assert run_cli("add", str(text)) == 1
    assert capsys.readouterr().err.startswith("error: ")
    # Headers whole, tensor data cut short (an interrupted download): refused now, not when llama.cpp loads it.
    half = tmp_path / "half.gguf"
    with open(smollm, "rb") as f:
        half.write_bytes(f.read(smollm.stat().st_size // 2))
    assert run_cli("add", str(half), "--name", "half") == 1
    size = half.stat().st_size
    assert capsys.readouterr().err == (
        f"error: {half}: the file is cut short: its tensors need {smollm.stat().st_size} bytes but it has {size};"
        " download or copy it again\n"
    )
    assert run_cli("add", str(tmp_path)) == 1
    folder = f"error: {tmp_path} is a folder, not a GGUF model file; give the .gguf file itself\n"
    assert capsys.readouterr().err == folder
    assert "half" not in cat.local_models()


def test_a_local_model_whose_file_went_away_says_so(tmp_path: Path, smollm: Path):
    copy = tmp_path / "copy.gguf"
    shutil.copy(smollm, copy)
    cat.add_local_model(copy, name="gone")
    copy.unlink()
    with pytest.raises(cat.NotInstalledError, match="no longer exists") as refused:
        cat.resolve_model("gone")
    # The remedies are the front end's own actions: the command line's commands by default, a page's fields there.
    gone = f"local model 'gone' points to {copy.resolve()}, which no longer exists"
    assert str(refused.value) == (
        f"{gone}; run `specchat models remove gone`, or add the file again with `specchat models add PATH --name gone`"
    )
    elsewhere = Remedies(
        add_file=lambda name: f"<add as {name}>", remove_model=lambda name: f"<remove {name}>", other_name=""
    )
    assert refused.value.worded(elsewhere) == f"{gone}; <remove gone>, or add the file again <add as gone>"
    # A download of a pair that uses it stops with the same words, before anything is fetched.
    write_catalog(cat.user_catalog_path(), '[pairs.mine]\ntarget = "gone"\ndraft = "gone"\n')
    with pytest.raises(cat.NotInstalledError) as downloading:
        download.download_pair("mine")
    assert str(downloading.value) == str(refused.value)


def test_models_list_json_lists_every_pair_with_both_files_and_the_default(capsys):
    assert run_cli("list", "--json") == 0
    data = json.loads(capsys.readouterr().out)

    catalog = cat.load_catalog()
    assert [p["name"] for p in data["pairs"]] == list(catalog.pairs)
    assert [p["name"] for p in data["pairs"] if p["default"]] == [data["default_pair"]] == [catalog.default]
    for pair in data["pairs"]:
        for role in ("target", "draft"):
            model = catalog.models[getattr(catalog.pairs[pair["name"]], role)]
            assert pair[role]["repo"] == model.repo and pair[role]["file"] == model.file
            assert pair[role]["size"] == model.size and pair[role]["installed"] is False
        assert pair["size"] == pair["target"]["size"] + pair["draft"]["size"]
    assert {m["name"] for m in data["models"]} == set(catalog.models)

    assert run_cli("list") == 0
    table = capsys.readouterr().out
    assert all(name in table for name in catalog.pairs) and "* " in table


def test_a_local_model_that_a_pair_uses_is_not_forgotten(qwen_pair, capsys):
    target, draft = qwen_pair
    assert run_cli("add", str(target), "--name", "qcoder15") == 0
    assert run_cli("add", str(draft), "--name", "qcoder05") == 0
    user = write_catalog(cat.user_catalog_path(), '[pairs.mine]\ntarget = "qcoder15"\ndraft = "qcoder05"\n')
    capsys.readouterr()

    assert run_cli("remove", "qcoder05") == 1
    assert capsys.readouterr().err == (
        f"error: local model 'qcoder05' is used by pair 'mine' in {user}; remove or change the pair there first\n"
    )
    assert "qcoder05" in cat.local_models()
    assert run_cli("list") == 0  # the catalog still loads
    # With another catalog for this one command, the user's still counts: it is in effect again for the next.
    only = 'default_pair = "only"\n[pairs.only]\ntarget = "qcoder15"\ndraft = "qcoder15"\n'
    other = write_catalog(user.with_name("other.toml"), only)
    assert run_cli("--catalog", str(other), "remove", "qcoder05") == 1
    assert f"used by pair 'mine' in {user}" in capsys.readouterr().err and "qcoder05" in cat.local_models()

    # Once the pair is gone, the model can go.
    user.write_text("", encoding="utf-8")
    assert run_cli("remove", "qcoder05") == 0
    assert "qcoder05" not in cat.local_models()


def test_a_pair_may_name_models_before_they_are_added(qwen_pair):
    target, draft = qwen_pair
    write_catalog(cat.user_catalog_path(), '[pairs.mine]\ntarget = "qcoder15"\ndraft = "qcoder05"\n')
    with pytest.raises(cat.CatalogError, match="register its file with `specchat models add PATH --name qcoder15`"):
        cat.load_catalog()

    # The advice can be followed, from the command line or the app's Add button: adding needs no complete pair.
    assert run_cli("add", str(target), "--name", "qcoder15") == 0
    cat.add_local_model(draft, "qcoder05")
    assert cat.resolve_pair("mine") == (target.resolve(), draft.resolve())
    # A catalog name is still refused while a pair is incomplete.
    cat.user_catalog_path().write_text('[pairs.mine]\ntarget = "qcoder15"\ndraft = "gone"\n', encoding="utf-8")
    with pytest.raises(SpecchatError, match="already a catalog name"):
        cat.add_local_model(draft, "qwen2.5-1.5b")


def test_a_path_that_is_not_utf8_is_refused_before_anything_is_written(tmp_path: Path, smollm: Path, capsys):
    odd = tmp_path / os.fsdecode(b"x\xff.gguf")  # Python holds the bad byte as a lone surrogate
    shutil.copy(smollm, odd)

    assert run_cli("add", str(odd), "--name", "oddname") == 1
    assert capsys.readouterr().err == (
        f"error: the path {tmp_path}/x\\xff.gguf is not valid UTF-8; rename the file, then add it again\n"
    )
    assert not cat.local_models_path().exists()
    assert run_cli("list") == 0


BAD_LOCAL_MODELS = {
    "models not a table": ("models = 3\n", "is not valid: 'models' must be a table"),
    "not toml": ("[models.a\n", "is not valid TOML"),
    "no path": ("[models.a]\npath = 3\n", "local model 'a' needs a 'path' string"),
    # A write keeps only the entries' paths: anything else would be lost, so it is refused, not dropped.
    "unknown top-level key": ('note = "mine"\n[models.a]\npath = "/a.gguf"\n', "has unknown key 'note'"),
    "unknown entry key": ('[models.a]\npath = "/a.gguf"\nctx = 8192\n', "local model 'a' has unknown key 'ctx'"),
}


@pytest.mark.parametrize("case", sorted(BAD_LOCAL_MODELS))
def test_a_broken_local_models_file_is_one_line_and_never_overwritten(case: str, smollm: Path, capsys):
    text, expected = BAD_LOCAL_MODELS[case]
    path = write_catalog(cat.local_models_path(), text)

    assert run_cli("add", str(smollm), "--name", "smol") == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}") and expected in err and err.count("\n") == 1, err
    assert path.read_text(encoding="utf-8") == text


def test_a_data_folder_that_cannot_be_made_is_one_line(smollm: Path, capsys, monkeypatch, tmp_path: Path):
    home = tmp_path / "home-is-a-file"
    home.write_text("")
    monkeypatch.setenv("SPECCHAT_HOME", str(home))
    assert run_cli("add", str(smollm), "--name", "smol") == 1
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and err.count("\n") == 1, err
