"""Allocate device memory from Python in several shapes of call stack.

Run by test_pyframes.py under `vramtrace run` on the simulated device, with
any CPython (no torch: cudaMalloc is called through ctypes). For every
allocation it records the Python stack it expects the recorder to see
(file, line, function and the function's first line, outermost first) and
prints them as one JSON line:
{"0x...": [[file, line, function, first_line], ...], ...}.
"""

import asyncio
import ctypes
import json
import sys
import threading

rt = ctypes.CDLL("libcudart.so.13")
expected = {}
lock = threading.Lock()


def callers(frame, line):
    """frame's stack, outermost first, with `line` for frame itself."""
    code = frame.f_code
    out = [[code.co_filename, line, code.co_name, code.co_firstlineno]]
    frame = frame.f_back
    while frame is not None:
        code = frame.f_code
        out.append([code.co_filename, frame.f_lineno, code.co_name, code.co_firstlineno])
        frame = frame.f_back
    return out[::-1]


def alloc(n):
    p = ctypes.c_void_p()
    rc = rt.cudaMalloc(ctypes.byref(p), ctypes.c_size_t(n)); here = sys._getframe(); line = here.f_lineno  # noqa: E702,E501
    assert rc == 0, rc
    with lock:
        expected[hex(p.value)] = callers(here, line)
    return p.value


def plain():
    return alloc(1 << 20)


def passthrough(fn):
    return fn


@passthrough
def decorated():
    return alloc(1 << 16)


def gen_allocs(k):
    for _ in range(k):
        yield alloc(4096)


def generator():
    return list(gen_allocs(3))


async def coro_inner():
    await asyncio.sleep(0)
    return alloc(8192)


async def coro_outer():
    a = await coro_inner()
    b = await asyncio.gather(coro_inner(), coro_inner())
    return [a, *b]


def asynchronous():
    return asyncio.run(coro_outer())


def raiser(depth):
    if depth == 0:
        raise ValueError("unwind")
    raiser(depth - 1)


def exception():
    try:
        raiser(5)
    except ValueError:
        alloc(16384)          # allocated right after frames unwound
    try:
        raiser(2)
    finally:
        alloc(32768)          # allocated while the exception unwinds


def exception_main():
    try:
        exception()
    except ValueError:
        pass


def worker(i, barrier):
    barrier.wait()
    for _ in range(20):
        alloc(4096 * (i + 1))


def threads():
    barrier = threading.Barrier(4)
    ts = [threading.Thread(target=worker, args=(i, barrier)) for i in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()


def signalled():
    """Threads allocate while the process sends itself SIGUSR1 (a snapshot
    written by vramtrace's thread, `--conf signal:SIGUSR1`)."""
    import os
    import signal
    import time
    done = threading.Event()

    def busy(i):
        while not done.is_set():
            alloc(4096 * (i + 1))
            time.sleep(0.001)

    ts = [threading.Thread(target=busy, args=(i,)) for i in range(3)]
    for t in ts:
        t.start()
    for _ in range(3):
        time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGUSR1)
    time.sleep(0.05)
    done.set()
    for t in ts:
        t.join()


SHAPES = {"plain": plain, "decorated": decorated, "generator": generator, "async": asynchronous,
          "exception": exception_main, "threads": threads, "signal": signalled}

if __name__ == "__main__":
    for name in sys.argv[1:]:
        SHAPES[name]()
    print(json.dumps(expected))
