"""Stored diagnoses: a shipped diagnoser's answer on a stored run, kept beside the run.

Diagnosing is most of a report's time (a probe trains, a tool replays the
loop), and a shipped diagnoser is deterministic: the same code on the same
record gives the same answer. So its answer is stored under a key made of the
diagnoser's name, the code it ran (:func:`diagnosis_code`: every module of
faultbench, its data sets and its diagnosers except those that only show or
score answers, and the versions of the libraries they call)
and the record's attempt id, and a later report reads it back instead of
diagnosing again. A change to any of that code gives a new key, so a stale
answer is never read; the files are hashed as code
(:func:`~faultbench.core.codetext.code_text`), so a docstring or comment edit
keeps every key and re-diagnoses nothing.

Only shipped diagnosers asked for by their registered name are stored: a
diagnoser object or a ``module:Class`` may hold state or code no key can see.
Only answers that do not depend on the clock are stored (``ok`` and
``error``); a timeout or a crash is diagnosed again next time. The seconds an
answer took are the ones measured when it ran, a wall-clock measurement like
every other.

The answers live in one Parquet table per diagnoser and code, keyed by the run's key and
attempt, the sampling its trace was read at and the share of it read
(:mod:`faultbench.scoring.answers`: ``<root>/answers/<diagnoser>/<code>/``, written in
segments, atomically); a store that cannot be written (read-only) is read from and nothing
is stored. A store standing on the shipped runs dataset also reads the answers exported
beside it (``results/diagnosers/<name>.answers.parquet``), made on those very runs.
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from faultbench.core.codetext import code_text
from faultbench.scoring import answers
from faultbench.scoring.harness import Outcome
from faultbench.storage.records import RunRecord, RunSpec
from faultbench.storage.store import Store

STORED_STATUSES = ("ok", "error")  # outcomes that do not depend on the clock
#: Libraries a shipped diagnoser's answer depends on, by distribution name.
LIBRARIES = (
    "torch",
    "numpy",
    "scipy",
    "scikit-learn",
    "pandas",
    "backpack-for-pytorch",
    "cockpit-for-pytorch",
    "weightwatcher",
    "torch-lr-finder",
)
#: The packages a diagnosis runs through: the library, its data sets and its diagnosers
#: (the last two are installed from their own folders, datasets/ and diagnosers/).
SOURCES = ("faultbench", "faultbench.datasets", "faultbench.diagnosers")
#: Parts of the package no diagnosis runs through: what is shown, and what is computed
#: from the answers afterwards (scores, summaries, whether a fault showed, this store);
#: which runs a grid or a calibration asks for (each answer is stored per run, under the
#: run's own key), where records are kept on disk (a record's content is keyed by the run
#: key, which hashes the code that trains it), and the tools beside the benchmark (the
#: doctor, preflight, calibration, ``faultbench bench``), which no diagnoser imports; and
#: the real-bug cases, whose code keys their own records (a change gives new records).
NOT_DIAGNOSIS = (
    "cli",
    "realbugs",
    "reporting",
    "tools",
    "faults/grid.py",
    "faults/levels.py",
    "storage/store.py",
    "scoring/scores.py",
    "scoring/summary.py",
    "scoring/manifest.py",
    "scoring/cache.py",
    "scoring/answers.py",
)


def source_files() -> dict[str, Path]:
    """Every source file a diagnosis can run through, by its module path
    (``faultbench.diagnosers/rules.py``), from where the packages were imported."""
    files: dict[str, Path] = {}
    for name in SOURCES:
        for folder in importlib.import_module(name).__path__:
            root = Path(folder).resolve()
            for path in root.rglob("*.py"):
                relative = path.relative_to(root)
                if name == "faultbench" and (
                    relative.parts[0] in NOT_DIAGNOSIS
                    or relative.as_posix() in NOT_DIAGNOSIS
                    or f"{name}.{relative.parts[0]}" in SOURCES
                ):
                    continue  # not a diagnosis's, or hashed as its own package
                files.setdefault(f"{name}/{relative.as_posix()}", path.resolve())
    return dict(sorted(files.items()))


#: Data files a module reads what it answers with (beside it): measured thresholds, inferred
#: invariants. Their bytes key the answers of every diagnoser that runs through the module.
DATA = {
    "faultbench/scoring/budget.py": ("budget.csv",),
    "faultbench.diagnosers/traincheck_tool.py": ("traincheck_invariants.json",),
}

#: The modules every diagnosis goes through, whatever the diagnoser: how a run is planned,
#: handed to it (in a worker or not) and its answer checked. An edit to any of them, or to
#: what they import, re-keys every diagnoser's answers.
EVERY_DIAGNOSIS = (
    "faultbench.scoring.evaluate",
    "faultbench.scoring.harness",
    "faultbench.scoring.worker",
    "faultbench.scoring.run",
)


def module_files(module: str) -> dict[str, Path]:
    """The files of :func:`source_files` that a diagnoser defined in ``module`` can run
    through: that module, :data:`EVERY_DIAGNOSIS`, and every module of the project they
    import (at the top or inside a function), with the packages above each, transitively.
    A module outside the project (a plug-in's) contributes what it imports of it."""
    files = source_files()
    by_name = _module_names(files)
    seen: set[str] = set()
    todo = [module, *EVERY_DIAGNOSIS]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        relative = by_name.get(name)
        path = files[relative] if relative is not None else _outside(name)
        if path is None:
            continue
        for base, names in _imports(path, name):
            # ``from pkg import module`` runs that module (and pkg's __init__, hashed
            # below); ``from module import name`` runs the module.
            modules = [f"{base}.{n}" for n in names if f"{base}.{n}" in by_name]
            found = modules if modules and len(modules) == len(names) else [base, *modules]
            todo += [n for n in found if n in by_name]  # the project's modules only
    # The packages above each module run on its import and are hashed, but what they import
    # is not followed: faultbench.diagnosers' __init__ imports every diagnoser to register
    # it, and one diagnoser's answers do not run through another's module.
    seen |= {parent for name in seen for parent in _parents(name) if parent in by_name}
    return {by_name[name]: files[by_name[name]] for name in sorted(seen & by_name.keys())}


def _module_names(files: dict[str, Path]) -> dict[str, str]:
    """``faultbench.diagnosers/rules.py`` -> ``faultbench.diagnosers.rules`` (a package's
    ``__init__.py``: the package), each name mapped to its key in ``files``."""
    names = {}
    for relative in files:
        package, _, file = relative.partition("/")
        parts = file.removesuffix(".py").split("/")
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join([package, *parts])] = relative
    return names


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _outside(name: str) -> Path | None:
    """The source of a module that is not the project's (a plug-in diagnoser's)."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin.endswith(".py") else None


@cache
def _imports(path: Path | str, name: str) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """What ``path`` (module ``name``) imports, anywhere in it: (module, ()) for ``import
    module``, (module, names) for ``from module import names`` (a name may be a module)."""
    path = Path(path)
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: list[tuple[str, tuple[str, ...]]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            found.append((base, tuple(alias.name for alias in node.names)))
    return tuple(found)


def code_for(diagnoser: object) -> str:
    """:func:`diagnosis_code` of the module that defines ``diagnoser``'s class: the key of
    its stored answers, which an edit to another diagnoser's module leaves as it is."""
    return diagnosis_code(type(diagnoser).__module__)


@cache
def diagnosis_code(module: str | None = None) -> str:
    """Hash of the code a diagnoser defined in ``module`` can run through
    (:func:`module_files`; every file of :func:`source_files` when None), as code (without
    docstrings and comments), and of the versions of ``LIBRARIES``."""
    files = source_files() if module is None else module_files(module)
    digest = hashlib.sha256()
    for relative, path in files.items():
        code = code_text(path.read_text(encoding="utf-8"))
        digest.update(f"{relative}\0{code}\0".encode())
        for data in DATA.get(relative, ()):  # a file the module reads its numbers from
            digest.update(f"{data}\0".encode() + path.with_name(data).read_bytes() + b"\0")
    for name in LIBRARIES:
        try:
            version = metadata.version(name)
        except metadata.PackageNotFoundError:
            version = "absent"
        digest.update(f"{name}=={version}\0".encode())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class DiagnosisCache:
    """Where one diagnoser's stored answers are read and written: its answer table under
    its code in the store (:mod:`faultbench.scoring.answers`), and the table exported
    beside the runs dataset the store stands on (a fresh clone's answers)."""

    store: Store
    diagnoser: str  # the registered name
    code: str  # code_for(the diagnoser)
    every: int  # the sampling the traces were read at
    prefix: float = 1.0  # the share of each run's steps it was cut at (1.0: whole)

    @property
    def table(self) -> answers.AnswerTable:
        """The answer table (opened once per process)."""
        folder = self.store.root / answers.FOLDER / self.diagnoser / self.code
        known = answers.TABLES.get((folder, self.code))  # asked per answer: no file look-up
        if known is not None:
            return known
        return answers.table(folder, self.code, shipped_answers(self.store, self.diagnoser))

    def _index(self, record: RunRecord) -> answers.Index:
        return (record.key, record.attempt, self.every, self.prefix)

    def load(self, record: RunRecord) -> Outcome | None:
        """The stored answer on ``record``, or None (none stored)."""
        row = self.table.get(self._index(record))
        if row is None:
            return None
        outcome = row.get("_outcome")
        if outcome is None:  # built once: a report asks for each answer twice
            outcome = row["_outcome"] = Outcome(**answers.outcome_fields(row))
        return outcome

    def attempt_of(self, key: str) -> str | None:
        """The attempt of run ``key`` a stored answer was made on (None: none stored)."""
        return self.table.attempt_of(key, self.every, self.prefix)

    def answers_all(self, specs: Iterable[RunSpec]) -> bool:
        """Whether every run of ``specs`` is stored and has a stored answer: then asking
        for them diagnoses nothing, so nothing needs preparing (a learned diagnoser's fit)
        or starting (a worker process)."""
        for spec in specs:
            record = self.store.load(spec, note=False, copy=False)
            if record is None or self.load(record) is None:
                return False
        return True

    def save(self, record: RunRecord, outcome: Outcome) -> None:
        """Keep ``outcome`` if it does not depend on the clock (written with the next
        segment: :func:`faultbench.scoring.answers.flush_all`)."""
        if outcome.status not in STORED_STATUSES or not record.attempt:
            return
        self.table.put(answers.row_of(self._index(record), outcome, self.code))


def reads_every_step(store: Store, diagnoser: str) -> bool:
    """Whether ``diagnoser`` can be scored at every step from ``store``: its runs are read
    at every step (no lite runs dataset alone), or its answers at every step ship beside
    the dataset under its installed code (a fresh clone's rescoring of a shipped diagnoser
    reads them, never the every-step trace the lite tier lacks)."""
    if store.every_step:
        return True
    path = shipped_answers(store, diagnoser)
    if path is None:
        return False
    from faultbench.scoring.diagnosis import get_diagnoser

    code = code_for(get_diagnoser(diagnoser))
    return any(r["every"] == 1 and r["code"] == code for r in answers.read_rows(path))


def shipped_answers(store: Store, diagnoser: str) -> Path | None:
    """The answer table exported beside the runs dataset ``store`` stands on
    (``results/diagnosers/<name>.answers.parquet`` beside ``results/runs/``), if any."""
    if store.runs is None:
        return None
    path = store.runs.folder.parent / "diagnosers" / f"{diagnoser}{answers.SUFFIX}"
    return path if path.exists() else None
