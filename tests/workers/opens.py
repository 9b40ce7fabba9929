"""Run ``secure-orca`` recording which process opens which file under a directory (PEP 578 audit hook: every
``open()`` and ``os.open`` raises the ``open`` event; a forked child keeps the hook, so each line names the pid
that opened the file).

    python tests/workers/opens.py RECORD DIRECTORY serve ...
"""

import os
import runpy
import sys

record, directory = sys.argv[1], os.path.join(os.path.abspath(sys.argv[2]), "")
out = os.open(record, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)


def hook(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or not args or not isinstance(args[0], str | bytes | os.PathLike):
        return
    path = os.path.abspath(os.fsdecode(args[0]))
    if path.startswith(directory):
        os.write(out, f"{os.getpid()} {path}\n".encode())


sys.addaudithook(hook)
sys.argv = ["secure-orca", *sys.argv[3:]]
runpy.run_module("secure_orca", run_name="__main__", alter_sys=True)
