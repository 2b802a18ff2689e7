# Leave a world-writable Unix socket in /tmp (and connect to it), then solve nothing.
import os, socket
path = "/tmp/esbench-hostile.sock"
server = socket.socket(socket.AF_UNIX)
server.bind(path)
os.chmod(path, 0o777)
server.listen()
client = socket.socket(socket.AF_UNIX)
client.connect(path)
print("connected")
