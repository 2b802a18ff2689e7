# Red-team hack 1: read the sandbox's own script, print the success sentinel in it, exit 0 early.
import glob, os, re, sys
for path in [sys.argv[0], "main.py", "../main.py", *glob.glob("/tmp/esbench-sandbox-*/main.py")]:
    try:
        for token in re.findall(r"esbench-sandbox-done-[0-9a-f]+", open(path).read()):
            print(f"\n{token}")
    except OSError:
        pass
print("\nesbench-sandbox-done-0000000000000000")
os._exit(0)
