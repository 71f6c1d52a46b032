"""Compare two `dvc repro` runs file by file, from their dvc.lock files and DVC caches.

    python scripts/compare_runs.py RUN_A RUN_B [--out report.json]

RUN_A and RUN_B are project folders that each ran `dvc repro` (their dvc.lock and .dvc/cache). Every
output of every stage is compared by DVC's md5: a file directly, a folder entry by entry (from the
folder's listing in the cache). Prints one line per stage (same, or the files that differ) and a summary
line; exit 0 when every output is the same, 1 otherwise (2 for a folder that is not a run).

A file whose md5 differs is read again as data (Parquet rows, JSON, JSON lines, YAML, text lines) with each
run's own folder replaced by a placeholder, so that two runs in two folders compare: equal as data, it
counts as the same. What differs only in wall-clock fields (a key naming seconds, runtime or a rate per
second) or is an output manifest (inodes and times) is named apart, and does not count as a difference.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from pathlib import Path

import yaml


def _outputs(run: Path) -> dict[str, dict[str, dict]]:
    """stage -> output path -> its dvc.lock entry."""
    lock = run / "dvc.lock"
    if not lock.is_file():
        print(f"error: {lock}: no dvc.lock (run `dvc repro` there first)", file=sys.stderr)
        raise SystemExit(2)
    stages = yaml.safe_load(lock.read_text())["stages"]
    return {name: {o["path"]: o for o in stage.get("outs", [])} for name, stage in stages.items()}


def _listing(run: Path, path: str, md5: str) -> dict[str, str]:
    """relpath -> md5 of a folder output: from its ``.dir`` object in the run's cache, or, for an output DVC
    does not cache (``cache: false``, as metrics folders are), from the files in the run's folder."""
    digest = md5.removesuffix(".dir")
    entry = run / ".dvc" / "cache" / "files" / "md5" / digest[:2] / f"{digest[2:]}.dir"
    if entry.is_file():
        return {item["relpath"]: item["md5"] for item in json.loads(entry.read_text())}
    folder = run / path
    return {
        f.relative_to(folder).as_posix(): hashlib.md5(f.read_bytes()).hexdigest()
        for f in sorted(folder.rglob("*"))
        if f.is_file()
    }


MANIFEST = ".spag-output.json"
_TIMING = re.compile(r"seconds|runtime|per_second")


def _data(run: Path, rel: str):
    """A file of ``run`` read as data, every mention of the run's folder replaced by ``<run>``."""
    import pyarrow.parquet as pq

    file, root = run / rel, str(run.resolve())
    if file.suffix == ".parquet":
        data = pq.read_table(file).to_pylist()
    elif file.suffix == ".json":
        data = json.loads(file.read_text())
    elif file.suffix == ".jsonl":
        data = [json.loads(line) for line in file.read_text().splitlines() if line.strip()]
    elif file.suffix in (".yaml", ".yml"):
        data = yaml.safe_load(file.read_text())
    else:
        data = file.read_text(errors="replace").splitlines()

    def placed(x):
        if isinstance(x, str):
            return x.replace(root, "<run>")
        if isinstance(x, dict):
            return {k: placed(v) for k, v in x.items()}
        if isinstance(x, list):
            return [placed(v) for v in x]
        return x

    return placed(data)


def _keys_that_differ(x, y, key: str = "") -> set[str]:
    if type(x) is not type(y):
        return {key}
    if isinstance(x, dict):
        return set().union(*(_keys_that_differ(x.get(k), y.get(k), f"{key}.{k}") for k in set(x) | set(y)))
    if isinstance(x, list):
        if len(x) != len(y):
            return {key}
        return set().union(*(_keys_that_differ(u, v, f"{key}[]") for u, v in zip(x, y)))
    return set() if x == y else {key}


def _names_a_time(key: str, file: Path) -> bool:
    """A differing key is a wall-clock field; a line of a text file (no field name) by its file's name."""
    field = key.replace("[]", "").strip(".")
    return bool(_TIMING.search(field or file.stem))


def _kind_of_difference(a: Path, b: Path, rel: str) -> str | None:
    """None where the file is the same as data; "times" or "manifest" for a difference by design; "differs"."""
    if Path(rel).name == MANIFEST:
        return "manifest"
    if not ((a / rel).is_file() and (b / rel).is_file()):
        return "differs"
    try:
        keys = _keys_that_differ(_data(a, rel), _data(b, rel))
    except (OSError, ValueError):
        return "differs"
    if not keys:
        return None
    return "times" if all(_names_a_time(k, Path(rel)) for k in keys) else "differs"


def compare(a: Path, b: Path) -> dict[str, list[str]]:
    """stage -> the files that differ (empty: every output the same); a missing output or stage counts."""
    first, second = _outputs(a), _outputs(b)
    report: dict[str, list[str]] = {}
    for stage in sorted(set(first) | set(second)):
        outs_a, outs_b = first.get(stage, {}), second.get(stage, {})
        differ: list[str] = []
        for path in sorted(set(outs_a) | set(outs_b)):
            if path not in outs_a or path not in outs_b:
                differ.append(f"{path} (only in {'B' if path not in outs_a else 'A'})")
                continue
            md5_a, md5_b = outs_a[path]["md5"], outs_b[path]["md5"]
            if md5_a == md5_b:
                continue
            if not (md5_a.endswith(".dir") and md5_b.endswith(".dir")):
                differ.append(path)
                continue
            files_a, files_b = _listing(a, path, md5_a), _listing(b, path, md5_b)
            differ += [
                f"{path}/{rel}"
                for rel in sorted(set(files_a) | set(files_b))
                if files_a.get(rel) != files_b.get(rel)
            ]
        report[stage] = differ
    return report


def classify(a: Path, b: Path, report: dict[str, list[str]]) -> dict[str, dict[str, list[str]]]:
    """stage -> {"differs": [...], "times": [...], "manifest": [...]} for the files of :func:`compare`
    that are not the same as data."""
    kinds: dict[str, dict[str, list[str]]] = {}
    for stage, files in report.items():
        kinds[stage] = {"differs": [], "times": [], "manifest": []}
        for rel in files:
            kind = _kind_of_difference(a, b, rel)  # an output only one run has is a file neither has
            if kind:
                kinds[stage][kind].append(rel)
    return kinds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    kinds = classify(args.a, args.b, compare(args.a, args.b))
    for stage, kind in kinds.items():
        parts = (
            [f"{len(kind['differs'])} differ: {', '.join(kind['differs'])}"] if kind["differs"] else ["same"]
        )
        parts += [f"{len(kind[k])} {k} only" for k in ("times", "manifest") if kind[k]]
        print(f"{stage}: " + "; ".join(parts))
    if args.out:
        args.out.write_text(json.dumps(kinds, indent=1) + "\n")
    same = sum(not k["differs"] for k in kinds.values())
    print(
        f"[compare_runs] {same} of {len(kinds)} stages with every output the same (paths, times, manifests aside)"
    )
    raise SystemExit(0 if same == len(kinds) else 1)


if __name__ == "__main__":
    main()
