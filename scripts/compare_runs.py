"""Compare two `dvc repro` runs file by file, from their dvc.lock files and DVC caches.

    python scripts/compare_runs.py RUN_A RUN_B [--out report.json]

RUN_A and RUN_B are project folders that each ran `dvc repro` (their dvc.lock and .dvc/cache). Every
output of every stage is compared by DVC's md5: a file directly, a folder entry by entry (from the
folder's listing in the cache). Prints one line per stage (same, or the files that differ) and a summary
line; exit 0 when every output is the same, 1 otherwise (2 for a folder that is not a run).
"""

from __future__ import annotations

import argparse
import hashlib
import json
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--out", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    report = compare(args.a, args.b)
    for stage, differ in report.items():
        print(f"{stage}: " + ("same" if not differ else f"{len(differ)} differ: {', '.join(differ)}"))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    same = sum(not d for d in report.values())
    print(f"[compare_runs] {same} of {len(report)} stages with every output the same")
    raise SystemExit(0 if same == len(report) else 1)


if __name__ == "__main__":
    main()
