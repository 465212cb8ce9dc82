"""Regenerate INDEX.md from labels.toml: python3 tests/data/logs/corpus/make_index.py > tests/data/logs/corpus/INDEX.md"""

import os

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "labels.toml"), "rb") as fh:
    entries = tomllib.load(fh)["log"]
print("# Labelled corpus of real failure logs\n")
print("Excerpts of failure logs from public issue threads, trimmed to the relevant lines (user names in")
print("paths and private host names replaced). The labels (cause, fix, expected reading, culprit rank)")
print("are in `labels.toml`; this table is generated from it by `make_index.py`. A few are clean runs that")
print("merely contain scary words (`clean-*.log`, expected lead \"clean\"): none may read as failed.\n")
print("| file | source | root cause (as the thread established it) | expected lead |")
print("|---|---|---|---|")
for e in entries:
    src = e["source"].replace("https://github.com/", "")
    rank = f", rank {e['rank']}" if "rank" in e else ""
    print(f"| `{e['file']}` | [{src}]({e['source']}) | {e['cause'].replace('|', '/')} | "
          f"{', '.join(e['expect'])}{rank} |")
