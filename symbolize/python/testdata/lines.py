# Dumps, for every code object compiled from a few stdlib modules, its
# line table and the line of each instruction as this interpreter computes
# it (co_lines, or dis.findlinestarts before 3.10), one JSON object a line.
import dis
import importlib
import json
import sys
import types

MODULES = ["threading", "argparse", "json.decoder", "dis", "collections", "inspect"]


def codes(co):
    yield co
    for c in co.co_consts:
        if isinstance(c, types.CodeType):
            yield from codes(c)


for name in MODULES:
    mod = importlib.import_module(name)
    with open(mod.__file__, encoding="utf-8") as f:
        src = compile(f.read(), mod.__file__, "exec")
    for co in codes(src):
        n = len(co.co_code) // 2
        lines = [-1] * n
        if sys.version_info >= (3, 10):
            table = co.co_linetable
            for start, end, line in co.co_lines():
                for off in range(start, end, 2):
                    lines[off // 2] = -1 if line is None else line
        else:
            table = co.co_lnotab
            starts = list(dis.findlinestarts(co))
            line = co.co_firstlineno
            j = 0
            for i in range(n):
                while j < len(starts) and starts[j][0] <= 2 * i:
                    line = starts[j][1]
                    j += 1
                lines[i] = line
        print(json.dumps({"name": co.co_name, "first": co.co_firstlineno, "table": table.hex(), "lines": lines}))
