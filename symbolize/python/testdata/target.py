# Test target for symbolize/python: known frames at known lines.
# Lines marked "# @name" are looked up by the tests; keep the markers.
# Commands, one per line on stdin (answers on stdout):
#   call N          main thread: rec(N) ends in os.getppid()  -> "done"
#   block N         main thread: rec(N) ends blocked reading a byte of stdin
#                   -> "blocking" before, "done" after
#   thread N call   a new thread does "call N" while main joins it -> "done"
#   thread N block  a new thread does "block N"; -> "tid T" then "done"
import os
import sys
import threading


def leaf(mode):
    if mode == "call":
        os.getppid()  # @leaf_call
    else:
        os.read(0, 1)  # @leaf_block
    return 0


def middle(mode):
    return sum(map(lambda _: leaf(mode), [0]))  # @middle


class K:
    def meth(self, mode):
        return middle(mode)  # @meth


def rec(n, mode):
    if n == 0:
        return K().meth(mode)  # @rec_base
    return rec(n - 1, mode)  # @rec_step


def worker(n, mode):
    print("tid", threading.get_native_id(), flush=True)
    rec(n, mode)  # @worker


def readline():
    b = b""
    while not b.endswith(b"\n"):
        c = os.read(0, 1)
        if not c:
            return None
        b += c
    return b.decode()


def main():
    print("ready", os.getpid(), "%d.%d.%d" % sys.version_info[:3], flush=True)
    while True:
        line = readline()
        if line is None:
            return
        cmd = line.split()
        if cmd[0] == "call":
            rec(int(cmd[1]), "call")  # @main_call
        elif cmd[0] == "block":
            print("blocking", flush=True)
            rec(int(cmd[1]), "block")  # @main_block
        elif cmd[0] == "thread":
            t = threading.Thread(target=worker, args=(int(cmd[1]), cmd[2]))
            t.start()
            t.join()  # @main_join
        print("done", flush=True)


main()  # @module
