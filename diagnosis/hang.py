"""A hung job: which collective the ranks diverged at, which ranks never issued it, where each of
those is, and why.

    python -m diagnosis <dir of Flight Recorder dumps>     # <run dir>/hang, or any PyTorch job's

Reads PyTorch's Flight Recorder dumps (one pickle per rank, named as torch's own writer names them:
a common prefix and the rank, e.g. `rank_0`, `nccl_trace_rank_3`) and, where this tool collected
them (launchers/hang.py), each rank's stacks of every thread (`stacks_<r>.txt`) and its facts
(`facts_<r>.json`). Only the dumps are needed; the rest sharpens the class of cause. The rules, in
order (the divergence, the odd rank, its class): docs/diagnosis.md "A hung job: the hang rules".
Bad input (dumps of several jobs, another dump version, a rank's dump missing) is said in one line
each, and the diagnosis of what is there follows.
"""

from __future__ import annotations

import json
import pickle
import re
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

FR_VERSION = "2.10"  # the Flight Recorder dump version these rules were checked on (torch 2.14)
BUSY_RUNNING = 0.5  # a main thread runnable in half the samples while hung computes (a wait sleeps)
BUSY_SHARE = (
    0.2  # a main thread using more than a fifth of a core while hung computes (a wait uses ~0)
)
MIXED_S = 3600.0  # ranks' last entries further apart than this are not one job's
WAIT_WORDS = (
    "sleep",
    "next(",
    "__next__",
    "_next_data",
    "get(",
    "read",
    "recv",
    "select",
    "poll",
    "wait",
    "open(",
    "acquire",
    "join(",
)
DATA_WORDS = ("torch/utils/data", "/data/", "next(", "__next__", "_next_data", "loader", "batch")
CLASSES = ("data/I/O wait", "different code path", "mismatch", "dead rank", "busy compute")
_NUM = re.compile(r"^(.*?)(\d+)$")


class _NoGlobals(pickle.Unpickler):
    """A Flight Recorder dump is plain containers; anything else in a pickle is not one (and is not
    run)."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"{module}.{name} in a Flight Recorder dump")


@dataclass
class RankDump:
    rank: int
    fr: dict | None = None
    stacks: str | None = None
    info: dict = field(default_factory=dict)
    path: str | None = None


@dataclass
class Verdict:
    """What the rules found: `headline` is the one line; `lines` the findings in order; `problems`
    the bad input."""

    headline: str
    lines: list[str]
    problems: list[str]
    collective: dict | None = None  # pg, seq, op, sizes, issued_by, missing
    culprits: dict[int, dict] = field(
        default_factory=dict
    )  # rank -> {class, where, evidence, next}

    def text(self) -> str:
        return "\n".join([*self.problems, self.headline, *self.lines])


def is_dump_dir(path: str | Path) -> bool:
    """A directory holding Flight Recorder dumps (not a run or sweep directory)."""
    p = Path(path)
    return p.is_dir() and any(_read_fr(f) is not None for f in _candidates(p))


def _candidates(directory: Path) -> list[Path]:
    return sorted(
        f
        for f in directory.iterdir()
        if f.is_file() and _NUM.match(f.name) and f.stat().st_size > 0
    )


def _read_fr(path: Path) -> dict | None:
    try:
        with open(path, "rb") as f:
            d = _NoGlobals(f).load()
    except Exception:  # noqa: BLE001 - not a pickle of ours to read: not a dump
        return None
    return d if isinstance(d, dict) and "entries" in d and "pg_config" in d else None


def load(directory: str | Path) -> tuple[dict[int, RankDump], list[str]]:
    """The ranks' dumps in `directory`, and the problems found reading them (one line each)."""
    directory = Path(directory)
    problems: list[str] = []
    by_prefix: dict[str, dict[int, RankDump]] = {}
    for f in _candidates(directory):
        fr = _read_fr(f)
        if fr is None:
            continue
        prefix, rank = _NUM.match(f.name).groups()
        by_prefix.setdefault(prefix, {})[int(rank)] = RankDump(int(rank), fr=fr, path=str(f))
    if len(by_prefix) > 1:
        names = ", ".join(f"{p}* ({len(r)})" for p, r in sorted(by_prefix.items()))
        problems.append(
            f"dumps with different prefixes in {directory}: {names}; reading the largest set (put "
            "one "
            "job's dumps in a directory of their own)"
        )
    dumps = max(by_prefix.values(), key=len) if by_prefix else {}
    for r, d in dumps.items():
        stacks = directory / f"stacks_{r}.txt"
        info = directory / f"facts_{r}.json"
        if stacks.exists():
            d.stacks = stacks.read_text(errors="replace")
        if info.exists():
            try:
                d.info = json.loads(info.read_text())
            except ValueError:
                problems.append(f"{info}: not JSON; its rank's CPU share and steps are unknown")
    problems += _check(dumps, directory)
    return dumps, problems


def _check(dumps: dict[int, RankDump], directory: Path) -> list[str]:
    out = []
    versions = {str(d.fr.get("version")) for d in dumps.values()}
    for v in sorted(versions - {FR_VERSION}):
        ranks = [r for r, d in dumps.items() if str(d.fr.get("version")) == v]
        out.append(
            f"Flight Recorder dump version {v} (ranks {_ranks(ranks)}); these rules were checked "
            "on version "
            f"{FR_VERSION} (torch 2.14): read as that, check the result against torch's own "
            "analyzer"
        )
    jobs = {d.info.get("job") for d in dumps.values() if d.info.get("job")}
    lasts = {
        r: max((e.get("time_created_ns") or 0) for e in d.fr["entries"]) / 1e9
        for r, d in dumps.items()
        if d.fr["entries"]
    }
    worlds = {_world(d.fr) for d in dumps.values()} - {None}
    if (
        len(jobs) > 1
        or len(worlds) > 1
        or (lasts and max(lasts.values()) - min(lasts.values()) > MIXED_S)
    ):
        why = (
            f"{len(jobs)} job ids"
            if len(jobs) > 1
            else f"world sizes {sorted(worlds)}"
            if len(worlds) > 1
            else f"last collectives {(max(lasts.values()) - min(lasts.values())) / 3600:.1f} h "
            "apart"
        )
        out.append(
            f"dumps of different jobs mixed in {directory} ({why}); keep one job's dumps per "
            "directory: the "
            "diagnosis below compares them anyway"
        )
    world = max(worlds) if worlds else None
    if world:
        missing = sorted(set(range(world)) - set(dumps))
        if missing:
            out.append(
                f"no dump for rank {_ranks(missing)} of {world} (dead, or its dump was not "
                "collected): "
                "treated as a rank that never arrived"
            )
    return out


def _world(fr: dict) -> int | None:
    ranks = [_parse_ranks(c.get("ranks")) for c in (fr.get("pg_config") or {}).values()]
    return max((len(r) for r in ranks if r), default=None)


def _parse_ranks(text) -> list[int]:
    if isinstance(text, (list, tuple)):
        return [int(x) for x in text]
    return [int(x) for x in re.findall(r"\d+", str(text or ""))]


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return (
        ", ".join(map(str, ranks))
        if len(ranks) < 2
        else f"{', '.join(map(str, ranks[:-1]))} and {ranks[-1]}"
    )


# -------------------------------------------------------------------------------- frames and stacks


def _is_user(path: str) -> bool:
    """A user's or this project's file: not the interpreter's library, not an installed package, not
    frozen."""
    if not path or path.startswith("<"):
        return False
    if "site-packages" in path or "dist-packages" in path:
        return False
    return (
        not any(path.startswith(p) for p in {sys.base_prefix, sys.prefix} if p)
        or "/lib/python" not in path
    )


def _short(path: str) -> str:
    """Relative to the working directory; a path of another checkout (dumps made elsewhere, e.g. the
    committed ones) by its longest tail that names a file here, so a verdict reads the same from any
    clone."""
    here = str(Path.cwd()) + "/"
    if path.startswith(here):
        return path[len(here) :]
    parts = path.strip("/").split("/")
    for i in range(1, len(parts)):
        tail = "/".join(parts[i:])
        if (Path.cwd() / tail).is_file():
            return tail
    return path


def _local(path: str) -> Path:
    p = Path(path)
    return p if p.exists() else Path.cwd() / _short(path)


WRAPPERS = (
    "tasks/train/comm_counter.py",
)  # this project's pass-through wrappers of torch.distributed's calls


def call_site(entry: dict) -> str | None:
    """The innermost user frame that issued a Flight Recorder entry (past pass-through wrappers), as
    file:line."""
    for f in entry.get("frames") or []:
        if _is_user(f.get("filename", "")) and not f.get("filename", "").endswith(WRAPPERS):
            return f"{_short(f['filename'])}:{f.get('line')}"
    return None


_FRAME = re.compile(r'^\s*File "(.+)", line (\d+) in (\S+)')


def main_stack(stacks: str | None, main_ident: str | None) -> list[tuple[str, int, str]]:
    """The main thread's frames from faulthandler's text, innermost first: (file, line,
    function)."""
    if not stacks:
        return []
    blocks = re.split(r"\n(?=(?:Thread|Current thread) 0x)", stacks.strip())
    chosen = None
    for b in blocks:
        head = b.splitlines()[0] if b else ""
        if main_ident and main_ident.lower() in head.lower():
            chosen = b
    chosen = chosen or blocks[-1]  # faulthandler lists the main thread last
    return [
        (m.group(1), int(m.group(2)), m.group(3))
        for m in map(_FRAME.match, chosen.splitlines())
        if m
    ]


def _source(path: str, line: int) -> str:
    try:
        return _local(path).read_text(errors="replace").splitlines()[line - 1].strip()
    except (OSError, IndexError):
        return ""


def where(frames: list[tuple[str, int, str]]) -> tuple[str | None, str, list[str]]:
    """(innermost user frame file:line, its source line, the user frames' source lines outward)."""
    users = [(f, n, fn) for f, n, fn in frames if _is_user(f)]
    if not users:
        return None, "", []
    f, n, _ = users[0]
    return f"{_short(f)}:{n}", _source(f, n), [_source(uf, un) for uf, un, _ in users]


# ---------------------------------------------------------------------------------------- the rules


def describe(e: dict) -> str:
    """One Flight Recorder entry as a verdict names it: `all_reduce #17 (default group, 4 Float, 16
    B, from tasks/train/faults.py:106)`."""
    site = call_site(e)
    return f"{_op(e)} #{e.get('collective_seq_id')} ({_pg_name(e)}, {_size(e)}" + (
        f", from {site})" if site else ")"
    )


def _key(e: dict) -> tuple:
    return (
        e.get("profiling_name"),
        str(e.get("input_sizes")),
        str(e.get("input_dtypes")),
        call_site(e),
    )


def _op(e: dict) -> str:
    return str(e.get("profiling_name") or "?").split(":")[-1]


def _pg(e: dict) -> str:
    pg = e.get("process_group") or ("?", "?")
    return str(pg[0]) if isinstance(pg, (list, tuple)) else str(pg)


def _pg_name(e: dict) -> str:
    pg = e.get("process_group") or ("?", "?")
    desc = pg[1] if isinstance(pg, (list, tuple)) and len(pg) > 1 else ""
    if desc == "default_pg" or _pg(e) == "0":
        return "default group"
    return f"group {_pg(e)}" + (f" ({desc})" if desc and desc != "undefined" else "")


def _size(e: dict) -> str:
    sizes = e.get("input_sizes") or []
    dtypes = e.get("input_dtypes") or []
    width = {
        "Float": 4,
        "Half": 2,
        "BFloat16": 2,
        "Double": 8,
        "Long": 8,
        "Int": 4,
        "Byte": 1,
        "Char": 1,
        "Bool": 1,
    }
    n = 0
    for s, d in zip(sizes, dtypes):
        count = 1
        for x in s:
            count *= int(x)
        n += count * width.get(d, 4)
    shape = ", ".join("x".join(map(str, s)) or "scalar" for s in sizes) or "no tensor"
    return f"{shape} {'/'.join(sorted(set(dtypes)))}".strip() + (f", {_bytes(n)}" if n else "")


def _bytes(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n} B"


def _collectives(fr: dict) -> dict[str, dict[int, dict]]:
    out: dict[str, dict[int, dict]] = {}
    for e in fr.get("entries") or []:
        if e.get("is_p2p"):
            continue
        out.setdefault(_pg(e), {})[int(e.get("collective_seq_id", 0))] = e
    return out


def _members(dumps: dict[int, RankDump], pg: str) -> list[int]:
    for d in dumps.values():
        for e in d.fr["entries"]:
            if _pg(e) == pg:
                cfg = d.fr.get("pg_config") or {}
                for name, c in cfg.items():
                    if name == (e.get("process_group") or [None, None])[1] or name == pg:
                        return _parse_ranks(c.get("ranks"))
                if (
                    pg == "0" and "" in cfg
                ):  # gloo names the default group '' in pg_config, '0' in entries
                    return _parse_ranks(cfg[""].get("ranks"))
    return sorted(r for r, d in dumps.items() if pg in _collectives(d.fr))


def divergences(dumps: dict[int, RankDump], world: int | None = None) -> list[dict]:
    """Per process group, the first sequence number at which its members disagree: {pg, seq,
    by_rank, missing}."""
    per_rank = {r: _collectives(d.fr) for r, d in dumps.items()}
    pgs = sorted({pg for c in per_rank.values() for pg in c})
    out = []
    for pg in pgs:
        members = [
            m for m in (_members(dumps, pg) or sorted(per_rank)) if m in dumps
        ]  # a rank without a dump:
        # its absence says nothing about a sequence number (see _pending)
        seqs = {r: per_rank.get(r, {}).get(pg, {}) for r in members}
        start = max(
            (min(s) for s in seqs.values() if s), default=None
        )  # the ring buffer forgot older ones
        if start is None:
            continue
        end = max(max(s) for s in seqs.values() if s)
        for seq in range(start, end + 1):
            have = {r: s[seq] for r, s in seqs.items() if seq in s}
            keys = {_key(e) for e in have.values()}
            if len(have) < len(members) or len(keys) > 1:
                out.append(
                    {
                        "pg": pg,
                        "seq": seq,
                        "by_rank": have,
                        "missing": sorted(set(members) - set(have)),
                        "history": seqs,
                    }
                )
                break
    return sorted(
        out,
        key=lambda d: (
            min((e.get("time_created_ns") or 0) for e in d["by_rank"].values())
            if d["by_rank"]
            else 0
        ),
    )


def _timeline(fr: dict) -> list[dict]:
    return sorted(
        (e for e in fr.get("entries") or [] if not e.get("is_p2p")),
        key=lambda e: e.get("record_id", 0),
    )


def _tkey(e: dict) -> tuple:
    return (_pg(e), *_key(e))


def _off_pattern(d: RankDump) -> bool:
    """This rank's first unfinished collective is not what followed the one before it earlier in its
    own history (across groups): it took another path, or entered the groups in another order."""
    line = _timeline(d.fr)
    i = next((i for i, e in enumerate(line) if not e.get("retired")), None)
    if not i:
        return False
    prev = _tkey(line[i - 1])
    follow = Counter(_tkey(line[j + 1]) for j in range(i - 1) if _tkey(line[j]) == prev)
    return bool(follow) and _tkey(line[i]) != follow.most_common(1)[0][0]


def _odd_first(divs: list[dict], dumps: dict[int, RankDump]) -> list[dict]:
    """Of several divergences (groups entered in a different order), first the one whose missing
    rank is off its usual pattern: that rank changed the order."""
    if len(divs) < 2:
        return divs
    odd = {r for r, d in dumps.items() if _off_pattern(d)}
    return sorted(divs, key=lambda d: not (set(d["missing"]) & odd))


def _pending(dumps: dict[int, RankDump], absent: list[int]) -> list[dict]:
    """Every rank with a dump agrees; the ranks without one never came to the live ranks' first
    unfinished collective."""
    out = []
    for _, d in sorted(dumps.items()):
        line = _timeline(d.fr)
        e = next(
            (e for e in line if not e.get("retired")), line[-1] if line else None
        )  # failed: retired
        if e is not None:
            seq = int(e.get("collective_seq_id", 0))
            have = {
                r2: c[_pg(e)][seq]
                for r2, d2 in dumps.items()
                if seq in (c := _collectives(d2.fr)).get(_pg(e), {})
            }
            out.append(
                {"pg": _pg(e), "seq": seq, "by_rank": have, "missing": absent, "history": {}}
            )
            break
    return out


def _expected(div: dict):
    """What followed the collective before the divergent one, earlier in this group's history (every
    rank's)."""
    seq, history = div["seq"], div["history"]
    before = [s[seq - 1] for s in history.values() if seq - 1 in s]
    if not before:
        return None
    prev = _key(before[0])
    follow = Counter(
        _key(s[t + 1])
        for s in history.values()
        for t in s
        if t + 1 in s and t + 1 < seq and _key(s[t]) == prev
    )
    return follow.most_common(1)[0][0] if follow else None


def diagnose_dir(directory: str | Path, dead: set[int] | None = None) -> Verdict:
    """The verdict over a directory of dumps. dead: ranks known to be gone (the launcher saw their
    process end)."""
    dumps, problems = load(directory)
    if not dumps:
        return Verdict(
            f"no Flight Recorder dump in {directory} (files named <prefix><rank>, e.g. rank_0)",
            [],
            problems,
        )
    worlds = {_world(d.fr) for d in dumps.values()} - {None}
    world = max(worlds) if worlds else max(dumps) + 1
    dead = set(dead or ()) | (set(range(world)) - set(dumps))
    divs = _odd_first(divergences(dumps, world), dumps)
    if not divs and set(range(world)) - set(dumps):
        divs = _pending(dumps, sorted(set(range(world)) - set(dumps)))
    if not divs:
        lines = [
            f"rank {r}: {where(main_stack(d.stacks, d.info.get('main_thread')))[0] or 'no stack'}"
            for r, d in sorted(dumps.items())
        ]
        return Verdict(
            "no divergence: every rank issued the same collectives (not hung in a collective, or "
            "the "
            "ring buffer is too small to show it)",
            lines,
            problems,
        )
    div = divs[0]
    by_rank, missing = div["by_rank"], list(div["missing"])
    groups: dict[tuple, list[int]] = {}
    for r, e in by_rank.items():
        groups.setdefault(_key(e), []).append(r)
    odd_issuers: list[int] = []
    if len(groups) > 1:
        expected = _expected(div)
        if expected in groups:
            odd_issuers = sorted(r for k, rs in groups.items() if k != expected for r in rs)
        else:  # no history to tell: the minority is odd
            biggest = max(groups.values(), key=len)
            odd_issuers = sorted(r for rs in groups.values() if rs is not biggest for r in rs)
    normal = sorted(set(by_rank) - set(odd_issuers))
    # the collective the ranks diverged at: the one the normal ranks issued; where only odd ones
    # issued, theirs
    ref_rank = normal[0] if normal else sorted(by_rank)[0]
    ref = by_rank[ref_rank]
    issued = sorted(r for r, e in by_rank.items() if _key(e) == _key(ref))
    never = sorted(set(missing) | (set(by_rank) - set(issued)))
    coll = {
        "pg": div["pg"],
        "pg_name": _pg_name(ref),
        "seq": div["seq"],
        "op": _op(ref),
        "sizes": _size(ref),
        "call_site": call_site(ref),
        "issued_by": issued,
        "missing": never,
    }
    culprits: dict[int, dict] = {}
    pending_elsewhere = {
        r: [d2 for d2 in divs[1:] if r in d2["by_rank"] and d2["missing"]] for r in never
    }
    for r in never:
        culprits[r] = _classify(
            r, dumps.get(r), ref, by_rank.get(r), dead, pending_elsewhere.get(r) or []
        )
    head = _headline(coll, culprits)
    lines = [
        f"collective: {coll['op']} #{coll['seq']} on the {coll['pg_name']} ({coll['sizes']}), "
        "issued by rank "
        f"{_ranks(issued)} at {coll['call_site'] or 'an unknown site'}; never by rank "
        f"{_ranks(never)}"
    ]
    for r in sorted(culprits):
        c = culprits[r]
        lines.append(f"rank {r}: {c['class']}: {c['evidence']}; next: {c['next']}")
    for d2 in divs[1:]:
        e = next(iter(d2["by_rank"].values()), None)
        if e is not None:
            lines.append(
                f"also diverged: {_op(e)} #{d2['seq']} on the {_pg_name(e)}, issued by rank "
                f"{_ranks(d2['by_rank'])}, not by rank {_ranks(d2['missing'])}"
            )
    for r, d in sorted(dumps.items()):
        if d.info:
            lines.append(
                f"rank {r}: last step finished {d.info.get('steps_done')}; main thread while hung: "
                f"{100 * float(d.info.get('main_thread_cpu_share') or 0):.0f}% of a core, running "
                "in "
                f"{100 * float(d.info.get('main_thread_running') or 0):.0f}% of samples"
            )
    return Verdict(head, lines, problems, coll, culprits)


def _where_of(d: RankDump | None, entry: dict | None) -> str | None:
    if d is not None and d.stacks:
        return where(main_stack(d.stacks, d.info.get("main_thread")))[0]
    return call_site(entry) if entry else None


def _classify(
    rank: int, d: RankDump | None, ref: dict, mine: dict | None, dead: set[int], elsewhere: list
) -> dict:
    if d is None or rank in dead:
        return {
            "class": "dead rank",
            "where": None,
            "evidence": "its process was gone" if d is not None or rank in dead else "no dump",
            "next": f"read rank {rank}'s own error (the OOM killer, a native crash) in its log or "
            "dmesg",
        }
    frames = main_stack(d.stacks, d.info.get("main_thread"))
    at, src, outward = where(frames)
    pending = [e for e in d.fr["entries"] if not e.get("retired") and not e.get("is_p2p")]
    if (
        at is None
    ):  # no stacks (a dump torch wrote): the line of its last collective, pending or not
        last = (pending or _timeline(d.fr))[-1:]
        at = call_site(last[0]) if last else None
    if mine is not None:
        at = at or call_site(mine)
        if call_site(mine) == call_site(ref) and _op(mine) == _op(ref):
            return {
                "class": "mismatch",
                "where": call_site(mine),
                "evidence": f"it issued {_op(mine)} #{mine.get('collective_seq_id')} from the same "
                "line with "
                f"{_size(mine)} where the others have {_size(ref)}",
                "next": "make every rank pass tensors of the same shape and dtype there",
            }
        return {
            "class": "different code path",
            "where": call_site(mine),
            "evidence": f"it issued {_op(mine)} #{mine.get('collective_seq_id')} ({_size(mine)}) "
            "from "
            f"{call_site(mine)} instead of {_op(ref)} from {call_site(ref)}",
            "next": "make every rank issue the same collectives in the same order (no collective "
            "under a "
            "rank-dependent branch)",
        }
    running = d.info.get("main_thread_running")
    busy = (
        float(running) >= BUSY_RUNNING
        if running is not None
        else float(d.info.get("main_thread_cpu_share") or 0) > BUSY_SHARE
    )
    if elsewhere and pending and not busy:
        other = elsewhere[0]
        e = next(iter(other["by_rank"].values()))
        return {
            "class": "mismatch",
            "where": call_site(pending[-1]) or at,
            "evidence": f"it waits in {_op(pending[-1])} on the {_pg_name(pending[-1])} "
            f"({call_site(pending[-1])}) while rank {_ranks(other['missing'])} never entered "
            f"{_op(e)} #{other['seq']} on that group: process groups entered in a different order",
            "next": "enter the process groups in the same order on every rank",
        }
    if busy:
        return {
            "class": "busy compute",
            "where": at,
            "evidence": f"its main thread was running in {100 * float(running or 0):.0f}% of the "
            "samples "
            f"({100 * float(d.info.get('main_thread_cpu_share') or 0):.0f}% of a core) while hung, "
            f"at {at} (`{src}`)",
            "next": "look for a loop that never ends there (py-spy dump shows it live)",
        }
    data = any(w in (at or "") + " " + " ".join(outward) for w in DATA_WORDS) or any(
        "torch/utils/data" in f for f, _, _ in frames
    )
    how = "data loading" if data else "a wait"
    outer = next((s for s in outward[1:] if s), "")
    return {
        "class": "data/I/O wait",
        "where": at,
        "evidence": f"not in a collective: in {how} at {at} (`{src}`)"
        + (f", called from `{outer}`" if outer else ""),
        "next": "check the data source (a stalled file system, a worker that never returns, a "
        "sleep or lock)",
    }


def _headline(coll: dict, culprits: dict[int, dict]) -> str:
    what = f"{coll['op']} #{coll['seq']} ({coll['pg_name']}, {coll['sizes']}"
    what += f", from {coll['call_site']})" if coll["call_site"] else ")"
    never = coll["missing"]
    first = culprits[never[0]]
    head = f"hung: rank {_ranks(never)} never entered {what}"
    if first["class"] == "mismatch" and "same line" in first["evidence"]:
        return (
            f"hung: {what} differs on rank {_ranks(never)}: "
            f"{first['evidence'].removeprefix('it ')} — "
            "a mismatch"
        )
    if first["class"] in ("different code path", "mismatch") and first.get("where"):
        return (
            head + f"; rank {never[0]} {first['evidence'].removeprefix('it ')} — {first['class']}"
        )
    if first.get("where"):
        head += f"; rank {never[0]} is in {first['where']}"
    return head + f" — {first['class']}"


def main(directory: str) -> int:
    v = diagnose_dir(directory)
    print(v.text())
    return 0


__all__ = ["Verdict", "diagnose_dir", "describe", "is_dump_dir", "load", "divergences", "CLASSES"]
