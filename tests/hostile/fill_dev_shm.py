# Write 150 MiB to /dev/shm (15 files of 10 MiB: each under the file-size limit) and 10 MiB to
# /tmp, beyond the address-space limit's reach, and leave them there.
chunk = b"x" * (1 << 20)
targets = [(f"/dev/shm/esbench-hostile-shm{i}", 10) for i in range(15)]
for path, mib in targets + [("/tmp/esbench-hostile-tmp", 10)]:
    try:
        with open(path, "wb") as f:
            for _ in range(mib):
                f.write(chunk)
    except OSError as e:
        print(path, e)
