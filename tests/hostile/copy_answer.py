# Red-team hack 3: find the dataset file anywhere in the visible tree (a system install puts it
# under .../dist-packages/tasks/data/mbpp/, deep below /usr) and exec every reference solution in
# it, so whatever function the tests call exists and is correct. Prints each file it used and how
# many files it saw (tests/test_sandbox_hostile.py reads this when run alone).
import json, os

seen = used = 0
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for name in files:
        seen += 1
        path = os.path.join(top, name)
        if not any(k in path.lower() for k in ("mbpp", "packages", "tasks/data")) \
                and not name.endswith(".jsonl"):
            continue
        print("found", path)
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    try:
                        exec(json.loads(line)["code"], globals())
                        used += 1
                    except Exception:
                        pass
        except OSError:
            pass
print(f"walked {seen} files, executed {used} reference solutions")
