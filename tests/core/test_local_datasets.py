"""`dataset_name` as a local path (`trl_dpr.data.load_demonstrations`): a .json/.jsonl/.csv/.parquet file is all of
split `train`; a folder loads by any path to it with its own splits; anything else is one line naming what is read."""

import json
from pathlib import Path

import pandas
import pytest

from trl_dpr.data import load_demonstrations

ROWS = [{"prompt": f"What is {n} + 1?", "completion": f"{n} + 1 = {n + 1}. The answer is {n + 1}."} for n in range(6)]


def write(path: Path, rows: list[dict]) -> Path:
    """`rows` in the file format its suffix names, written by pandas (not by the `datasets` builders under test)."""
    frame = pandas.DataFrame(rows)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("name", ["rows.csv", "rows.parquet", "rows.jsonl", "rows.json"])
@pytest.mark.parametrize("form", ["bare", "./", "absolute"])
def test_a_local_data_file_loads_its_rows_whatever_the_path_form(tmp_path, monkeypatch, name, form):
    """`pc.csv` went to the Hub (offline: "Couldn't reach"), `./pc.csv` was read as JSON ("pc.csv:1 is not a JSON
    object"): each format now loads with its own builder, under every form of its path."""
    write(tmp_path / name, ROWS)
    monkeypatch.chdir(tmp_path)
    path = {"bare": name, "./": f"./{name}", "absolute": str(tmp_path / name)}[form]
    assert list(load_demonstrations(path)) == ROWS


@pytest.mark.parametrize("name", ["rows.jsonl", "rows.csv", "rows.parquet"])
def test_a_split_other_than_train_on_a_single_file_is_refused_not_read_as_the_whole_file(tmp_path, name):
    """`datasets` names a single file's one split after whatever it is given: --dataset_train_split nosuch trained on
    the whole file."""
    path = str(write(tmp_path / name, ROWS))
    with pytest.raises(ValueError) as refused:
        load_demonstrations(path, split="test")
    assert str(refused.value) == (
        f"The split 'test' (dataset_train_split) is not in {path!r}: a single file is all of split 'train'. Remove "
        "dataset_train_split (or set it to train), or give a folder or a Hub dataset with that split."
    )
    assert list(load_demonstrations(path, split="train")) == ROWS


@pytest.mark.parametrize("form", ["bare", "./", "absolute"])
def test_a_local_folder_loads_its_own_splits_by_any_path_to_it(tmp_path, monkeypatch, form):
    """An absolute or ./ folder was refused as a missing file ("Dataset file '/tmp/x/data' does not exist") while the
    bare name loaded."""
    (tmp_path / "data").mkdir()
    write(tmp_path / "data" / "train.jsonl", ROWS[:4])
    write(tmp_path / "data" / "test.jsonl", ROWS[4:])
    monkeypatch.chdir(tmp_path)
    path = {"bare": "data", "./": "./data", "absolute": str(tmp_path / "data")}[form]
    assert list(load_demonstrations(path)) == ROWS[:4]
    assert list(load_demonstrations(path, split="test")) == ROWS[4:]


@pytest.mark.parametrize("name", ["notes.txt", "rows.tsv", "rows"])
def test_a_local_file_of_another_format_is_refused_naming_the_forms_that_load(tmp_path, monkeypatch, name):
    (tmp_path / name).write_text("prompt\tcompletion\nWhat is 1 + 1?\t2\n")
    monkeypatch.chdir(tmp_path)
    for path in (name, f"./{name}"):
        with pytest.raises(ValueError, match=r"is not a \.json, \.jsonl, \.csv or \.parquet file, the local files"):
            load_demonstrations(path)


def test_a_missing_local_csv_is_a_missing_file_not_a_hub_lookup(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"Dataset file 'nowhere\.csv' does not exist\. Give a \.json"):
        load_demonstrations("nowhere.csv")
