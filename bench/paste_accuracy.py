"""Score `distdoctor log` over the labelled pasted tool outputs and print every miss:
python3 bench/paste_accuracy.py [--round | --round2 | --round2b | --round2c] (only the pastes of
the first first-sight round, of the second, or of the second's second or third batch).
Recognised? stated back? the labelled verdict, by the labelled check? nothing invented? what the
paste cannot show said? The floor the test holds it to is tests/data/logs/pasted/score.toml."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.harness import pastes  # noqa: E402


def main() -> int:
    if "--round2c" in sys.argv:
        entries = pastes.round_entries(pastes.FIRST_OF_ROUND2_BATCH3)
    elif "--round2b" in sys.argv:
        entries = pastes.round_entries(pastes.FIRST_OF_ROUND2_BATCH2, pastes.UNREAD_SAMPLES)
    elif "--round2" in sys.argv:
        entries = pastes.round_entries(pastes.FIRST_OF_ROUND2, pastes.FIRST_OF_ROUND2_BATCH2)
    elif "--round" in sys.argv:
        entries = pastes.round_entries(pastes.FIRST_OF_ROUND, pastes.FIRST_OF_ROUND2)
    else:
        entries = pastes.labels()
    accuracy, verdicts = pastes.score(entries)
    for v in verdicts:
        if not v.right:
            print(f"miss  {v.file}\n      got: {v.got}\n      " + "; ".join(v.misses)
                  + "".join(f"\n      | {s[:160]}" for s in v.summaries[:4]))
    right = sum(v.right for v in verdicts)
    unrecognised = sum("not recognised" in v.misses for v in verdicts)
    print(f"accuracy {accuracy:.3f} ({right}/{len(verdicts)}); not recognised: {unrecognised}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
