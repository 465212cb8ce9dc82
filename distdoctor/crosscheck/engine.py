"""The one comparison engine: which facts must agree across the members of a job or fleet, which
must differ, and who the odd members are.

A *member* is a name and a flat mapping of named facts: a node and its inventory (`fleet`,
`compare`, `check` under a launcher), a rank and its fingerprint (`nccl-test`), a rank seen in a
log (`log`). *Rules* are data: "NCCL versions must agree (FAIL)", "boot ids must differ (FAIL)".
An `[expect]` table pins a fact to a value (NHC-style) and then wins over the majority.

    diffs = compare(members, RULES, expect={"gpu.count": 8})
    findings = [to_finding(d, noun="node") for d in diffs]

Pure: no I/O. Cost is one pass over the members per concrete key, so 10,000 nodes with a hundred
facts each compare in well under a second.
"""

from __future__ import annotations

import fnmatch
import math
import re
import string
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

from distdoctor import fixes, remote
from distdoctor.model import Finding, Status
from distdoctor.remote import Fix
from distdoctor.text import fold, one_line, plural

AGREE = "agree"
DIFFER = "differ"
ABSENT = "(absent)"


@dataclass(frozen=True)
class Rule:
    """One fact and what must hold for it across members.

    key      fact name; a glob (`env.NCCL_*`, `net.if.*.mtu`) expands to every key present
    label    the fact in words, for the summary ("NCCL version")
    must     AGREE: every member has the same value; DIFFER: no two members share a value
    status   how bad a violation is
    why      one sentence: what breaks when it does not hold
    run      the command to run on each odd member, as the member's own shell would take it;
             fields {value} (their value), {reference} (majority or expected value), {key},
             {label}. fix_for addresses it (`ssh NODE`, `clush -w NODES --`, or a comment when a
             name or a value is not safe in a command: distdoctor/remote.py). A callable
             (Difference) -> str gives it from the values ("" for none: a comment instead).
    fix      further lines of the fix, after run's; the same fields and {nodes} (the folded
             outlier names). Shell that works as printed, or a `# comment`; a command line
             whose value is not a plain word is printed as a comment. A callable
             (Difference) -> Fix records (or text) gives the whole fix itself, addressed.
    absent   "ignore": members without the fact take no part; "value": a missing fact is a value
             of its own (a node without NCCL among nodes with it)
    best     for AGREE: picks the reference from the values present instead of the majority
             (check results: the best status present, so a check failing on most nodes still
             names the failing ones); None keeps the majority
    """

    key: str
    label: str
    must: str = AGREE
    status: Status = Status.WARN
    why: str = ""
    fix: str | Callable[["Difference"], str | Fix | Sequence[Fix]] = ""
    absent: str = "ignore"
    best: Callable[[Sequence[Any]], Any] | None = None
    run: str | Callable[["Difference"], str] = ""

    def for_key(self, key: str) -> "Rule":
        if key == self.key:
            return self
        return Rule(key, self.label.replace("*", _glob_part(self.key, key)), self.must, self.status,
                    self.why, self.fix, self.absent, self.best, self.run)


@dataclass(frozen=True)
class Group:
    value: Any
    members: tuple[str, ...]


@dataclass(frozen=True)
class Difference:
    rule: Rule
    groups: tuple[Group, ...]           # largest first
    reference: Any = None               # the majority or expected value (None when there is none)
    basis: str = "majority"             # majority | best | expected | tie | duplicate
    outliers: tuple[str, ...] = ()      # members whose value is not the reference (or duplicates)
    total: int = 0                      # members that took part
    status: Status = Status.WARN

    @property
    def key(self) -> str:
        return self.rule.key

    def outlier_groups(self) -> list[Group]:
        if self.basis in ("tie", "duplicate"):
            return list(self.groups)
        return [g for g in self.groups if _norm(g.value) != _norm(self.reference)
                or self.basis == "expected" and not matches_expectation(g.value, self.reference)]


def compare(members: Mapping[str, Mapping[str, Any]], rules: Sequence[Rule],
            expect: Mapping[str, Any] | None = None) -> list[Difference]:
    """Every violated rule and expectation, in rule order (expectations for facts no rule names
    come last). Rules whose key is a glob expand over the keys any member has."""
    expect = dict(expect or {})
    present = _keys(members) if any(_is_glob(r.key) for r in rules) else set()
    out: list[Difference] = []
    seen: set[str] = set()
    for rule in rules:
        keys = sorted(k for k in present if fnmatch.fnmatchcase(k, rule.key)) if _is_glob(rule.key) else [rule.key]
        for key in keys:
            if key in seen:
                continue
            seen.add(key)
            concrete = rule.for_key(key)
            diff = _expected(members, concrete, expect[key]) if key in expect else _judge(members, concrete)
            if diff is not None:
                out.append(diff)
    for key, wanted in expect.items():
        if key not in seen:
            diff = _expected(members, Rule(key, key, AGREE, Status.FAIL, absent="value"), wanted)
            if diff is not None:
                out.append(diff)
    return out


def _judge(members: Mapping[str, Mapping[str, Any]], rule: Rule) -> Difference | None:
    groups = _group(members, rule)
    total = sum(len(g.members) for g in groups)
    if rule.must == DIFFER:
        dups = tuple(g for g in groups if len(g.members) > 1 and g.value != ABSENT)
        if not dups:
            return None
        return Difference(rule, dups, None, "duplicate", tuple(m for g in dups for m in g.members), total,
                          rule.status)
    if len(groups) < 2:
        return None
    if rule.best is not None:
        ref = rule.best([g.value for g in groups])
        first = [g for g in groups if _norm(g.value) == _norm(ref)]
        rest = [g for g in groups if _norm(g.value) != _norm(ref)]
        return Difference(rule, tuple(first + rest), ref, "best", tuple(m for g in rest for m in g.members),
                          total, rule.status)
    if len(groups[0].members) > len(groups[1].members):
        ref = groups[0].value
        outliers = tuple(m for g in groups[1:] for m in g.members)
        return Difference(rule, groups, ref, "majority", outliers, total, rule.status)
    return Difference(rule, groups, None, "tie", tuple(m for g in groups for m in g.members), total, rule.status)


def _expected(members: Mapping[str, Mapping[str, Any]], rule: Rule, wanted: Any) -> Difference | None:
    rule = Rule(rule.key, rule.label, AGREE, Status.FAIL if rule.status.severity < Status.FAIL.severity
                else rule.status, rule.why, rule.fix, "value")
    groups = _group(members, rule)
    bad = [g for g in groups if not matches_expectation(g.value, wanted)]
    if not bad:
        return None
    return Difference(rule, groups, wanted, "expected", tuple(m for g in bad for m in g.members),
                      sum(len(g.members) for g in groups), rule.status)


def _group(members: Mapping[str, Mapping[str, Any]], rule: Rule) -> tuple[Group, ...]:
    buckets: "OrderedDict[Any, tuple[Any, list[str]]]" = OrderedDict()
    for name, facts in members.items():
        if rule.key in facts and facts[rule.key] is not None:
            value = facts[rule.key]
        elif rule.absent == "value":
            value = ABSENT
        else:
            continue
        norm = _norm(value)
        if norm not in buckets:
            buckets[norm] = (value, [])
        buckets[norm][1].append(name)
    ordered = sorted(buckets.values(), key=lambda vm: -len(vm[1]))
    return tuple(Group(v, tuple(ms)) for v, ms in ordered)


# --- expectations -----------------------------------------------------------------------------

_OP = re.compile(r"^\s*(>=|<=|==|!=|>|<)\s*(.+?)\s*$")
_UNLIMITED = {"unlimited", "infinity", "inf", "-1"}


def matches_expectation(value: Any, wanted: Any) -> bool:
    """`wanted` is a value (equality; numbers compare as numbers, 'unlimited' is infinite) or a
    string with a comparison operator: ">= 8", "!= 0", "< 9000"."""
    if isinstance(wanted, str):
        m = _OP.match(wanted)
        if m:
            op, target = m.groups()
            va, vb = _version(value), _version(target)
            if va is not None and vb is not None and max(len(va), len(vb)) > 1:
                # "2.21.5 >= 2.18", "12.4 < 12.10": dotted versions compare part by part, not as floats
                width = max(len(va), len(vb))
                a, b = va + (0,) * (width - len(va)), vb + (0,) * (width - len(vb))
                return {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
            a, b = _number(value), _number(target)
            if a is None or b is None:
                a, b = _version(value), _version(target)
                if a is not None and b is not None:  # 2.18 == 2.18.0
                    width = max(len(a), len(b))
                    a, b = a + (0,) * (width - len(a)), b + (0,) * (width - len(b))
            if a is None or b is None:
                equal = _norm(value) == _norm(target)
                return equal if op in ("==", ">=", "<=") else (not equal if op == "!=" else False)
            return {">=": a >= b, "<=": a <= b, "==": a == b, "!=": a != b, ">": a > b, "<": a < b}[op]
    a, b = _number(value), _number(wanted)
    if a is not None and b is not None:
        return a == b
    return _norm(value) == _norm(wanted)


_VERSION = re.compile(r"^\s*v?(\d+(?:\.\d+)*)(?:[+~-][\w.+~-]*)?\s*$")


def _version(value: Any) -> tuple[int, ...] | None:
    """'2.21.5' -> (2, 21, 5); '2.5.1+cu124' -> (2, 5, 1); None for what is not a dotted version."""
    if isinstance(value, bool) or not isinstance(value, str):
        return None
    m = _VERSION.match(value)
    return tuple(int(p) for p in m.group(1).split(".")) if m else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) if not (isinstance(value, float) and math.isnan(value)) else None
    text = str(value).strip().lower()
    if text in _UNLIMITED:
        return math.inf
    try:
        return float(text)
    except ValueError:
        return None


# --- rendering --------------------------------------------------------------------------------

def show(value: Any) -> str:
    if value is None or value == "":
        return "(unset)"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return one_line(",".join(str(v) for v in value)) or "(none)"
    return one_line(str(value))


def describe(diff: Difference, noun: str = "node", names: Callable[[Iterable[str]], str] = fold) -> str:
    """One line: what differs, the reference, and who is odd. `names` renders a group of members
    (nccl-test shows ranks with their hosts)."""
    label = diff.rule.label
    if diff.basis == "duplicate":
        parts = [f"{names(g.members)} share {label} {show(g.value)}" for g in diff.groups]
        return "; ".join(parts)
    if diff.basis == "expected":
        odd = "; ".join(f"{show(g.value)} on {names(g.members)}" for g in diff.outlier_groups())
        return f"{label} is not the expected {show(diff.reference)}: {odd}"
    if diff.basis == "tie":
        return f"{label} differs: " + "; ".join(f"{show(g.value)} on {names(g.members)}" for g in diff.groups)
    major = diff.groups[0]
    odd = "; ".join(f"{show(g.value)} on {names(g.members)}" for g in diff.groups[1:])
    if diff.basis == "best":
        return f"{label}: {odd} ({show(major.value)} on {names(major.members)})"
    return (f"{label} differs: {odd} (the other {plural(len(major.members), noun)} "
            f"have {show(major.value)})")


# A caller's say in how a record for members reaches them (report files that share a hostname
# are named by file, not by host).
Address = Callable[[Fix], Fix]


def _records(made: str | Fix | Sequence[Fix]) -> list[Fix]:
    """A rule's own fix as records: a string (lines printed as they are, each on one line) or
    records."""
    if isinstance(made, Fix):
        return [made]
    if isinstance(made, str):
        return [Fix((remote.one_line(line),)) for line in made.splitlines() if line]
    return list(made)


def fix_for(diff: Difference, address: Address | None = None) -> tuple[Fix, ...]:
    """The fix for one difference: the rule's `run` command addressed to the odd members, then
    its further `fix` lines; a comment saying what to make the same when the rule has neither.
    A command is only built from plain values: a line whose value is not one (or a tie's missing
    reference) is a comment, or, for `run`, the comment saying what to make the same."""
    rule = diff.rule
    parts: list[Fix] = []
    if rule.run:
        command = rule.run(diff) if callable(rule.run) else \
            _filled(rule.run, diff) if _plain_fields(rule.run, diff) else ""
        parts.append(Fix((command,), diff.outliers) if command else _what_to_do(diff))
    if callable(rule.fix):
        parts += [p for p in _records(rule.fix(diff)) if p] or ([] if rule.run else [_what_to_do(diff)])
    elif rule.fix:
        for line in rule.fix.splitlines():
            if "reference" in _fields(line) and diff.reference is None:
                continue  # a line about the reference when there is none (a tie)
            text = _filled(line, diff)
            parts += _records(text if line.startswith("#") or _plain_fields(line, diff) else remote.comment(text))
    elif not rule.run:
        parts.append(_what_to_do(diff))
    return tuple(address(p) if address and p.nodes else p for p in parts)


def _what_to_do(diff: Difference) -> Fix:
    nodes, label = remote.shown(diff.outliers), diff.rule.label
    if diff.key.startswith("pip.") and diff.reference is not None and diff.basis != "duplicate":
        # An [expect] pin or a majority version of a package: install it, not "make pip.x 2.4.1".
        made = fixes.pip_install(diff.key[len("pip."):], diff.reference, diff.outliers)
        if made:
            return made
    if diff.basis == "duplicate":
        return Fix(comment=f"give {nodes} distinct {label} values")
    if diff.reference is None:
        return Fix(comment=f"make {label} the same on {nodes}")
    return Fix(comment=f"on {nodes}: make {label} {show(diff.reference)}")


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


def _values(diff: Difference) -> dict[str, Any]:
    odd = diff.outlier_groups()
    return {"value": odd[0].value if odd else "", "reference": diff.reference, "key": diff.key,
            "label": diff.rule.label}


def _plain_fields(template: str, diff: Difference) -> bool:
    """Whether every field template uses may go into a command: plain values, and no {nodes}
    (a command for the nodes is `run`, which fix_for addresses)."""
    values = _values(diff)
    return all(name != "nodes" and remote.plain(values.get(name)) for name in _fields(template))


def _filled(template: str, diff: Difference) -> str:
    """template with the difference's fields, each shown on one line."""
    return template.format(nodes=remote.shown(diff.outliers), **{k: show(v) for k, v in _values(diff).items()})


def to_finding(diff: Difference, noun: str = "node", max_listed: int = 20,
               names: Callable[[Iterable[str]], str] = fold, address: Address | None = None) -> Finding:
    """The finding for one difference; evidence keeps folded names, so 10,000 nodes stay small."""
    groups = {show(g.value): fold(g.members) for g in diff.groups[:max_listed]}
    evidence = {"fact": diff.key, "basis": diff.basis, "reference": _jsonable(diff.reference),
                "outliers": fold(diff.outliers), "members": diff.total, "groups": groups}
    return Finding(diff.status, describe(diff, noun, names), subject=diff.key, explanation=diff.rule.why,
                   evidence=evidence, remedy=fix_for(diff, address))


# --- small pieces -------------------------------------------------------------------------------

def _keys(members: Mapping[str, Mapping[str, Any]]) -> set[str]:
    keys: set[str] = set()
    for facts in members.values():
        keys.update(facts)
    return keys


def _is_glob(key: str) -> bool:
    return any(c in key for c in "*?[")


def _glob_part(pattern: str, key: str) -> str:
    """What the pattern's one '*' stood for: ('env.*', 'env.NCCL_ALGO') -> 'NCCL_ALGO'."""
    if pattern.count("*") != 1:
        return key
    head, tail = pattern.split("*")
    return key[len(head):len(key) - len(tail)] if len(key) >= len(head) + len(tail) else key


def _norm(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((str(k), _norm(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set)):
        return tuple(_norm(v) for v in value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    return show(value)
