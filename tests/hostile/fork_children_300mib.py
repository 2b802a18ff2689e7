# Red-team hack (memory across processes): eight forked children each take 300 MiB, so the program as a
# whole holds 2.4 GiB although every process stays under the 512 MiB address-space limit.
# Prints how many children held their share; exits non-zero unless all did.
import os, sys, time

CHILDREN, MIB = int(globals().get("ESBENCH_CHILDREN", 8)), int(globals().get("ESBENCH_MIB", 300))
pids = []
for _ in range(CHILDREN):
    pid = os.fork()
    if pid == 0:
        block = b"x" * (MIB << 20)  # written, so every page is resident
        time.sleep(2)
        os._exit(0 if len(block) else 1)
    pids.append(pid)
held = sum(os.waitpid(pid, 0)[1] == 0 for pid in pids)
print(f"{held} of {CHILDREN} children held {MIB} MiB", flush=True)
if held != CHILDREN:
    sys.exit(1)
