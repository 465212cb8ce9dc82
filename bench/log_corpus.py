"""Score `distdoctor log` over the labelled corpus of real failure logs and print every miss:
python3 bench/log_corpus.py [--from FILE] (score only the entries from FILE's label on: a new
round's first sight). The floor the test holds it to is tests/data/logs/corpus/score.toml."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.harness import corpus  # noqa: E402


def main() -> int:
    first = sys.argv[sys.argv.index("--from") + 1] if "--from" in sys.argv else ""
    if first:
        names = [e["file"] for e in corpus.labels()]
        keep = set(names[names.index(first):])
        verdicts = [corpus.judge(e) for e in corpus.labels() if e["file"] in keep]
        accuracy = sum(v.right for v in verdicts) / len(verdicts)
    else:
        accuracy, verdicts = corpus.score()
    for v in verdicts:
        if not v.right:
            print(f"miss  {v.file}\n      led with {v.got!r} rank {v.rank}; want {v.want} rank {v.want_rank}"
                  f"{'  (READ AS CLEAN)' if v.green else ''}\n      {v.summary[:200]}")
    right = sum(v.right for v in verdicts)
    print(f"accuracy {accuracy:.3f} ({right}/{len(verdicts)}); read as clean: {sum(v.green for v in verdicts)}; "
          f"floor {corpus.floor()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
