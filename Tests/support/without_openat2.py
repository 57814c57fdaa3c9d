#!/usr/bin/python3
"""Runs a command under a seccomp filter that answers ENOSYS to openat2(2), as a kernel before 5.6 or a container's
filter would, so that a test sees Haul fall back to walking paths itself.

Usage: without_openat2.py PROGRAM [ARGUMENT ...]
Needs Debian's python3-seccomp (.ci/run installs it).
"""
import errno
import os
import sys

import seccomp

if len(sys.argv) < 2:
    sys.exit("usage: without_openat2.py PROGRAM [ARGUMENT ...]")
rules = seccomp.SyscallFilter(defaction=seccomp.ALLOW)
rules.add_rule(seccomp.ERRNO(errno.ENOSYS), "openat2")
rules.load()
os.execv(sys.argv[1], sys.argv[1:])
