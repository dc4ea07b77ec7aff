"""What the interop test scripts (test_interop.py, test_compare.py) share:
running the built vramtrace, and running the one test named on the command
line (meson registers one test per name)."""
import subprocess
import sys


def vramtrace_runner(exe):
    """vt(*args, check=True): run `exe ARGS` (60 s at most); with check, a
    non-zero exit fails the test with vramtrace's stderr."""
    def vt(*args, check=True):
        p = subprocess.run([exe] + [str(a) for a in args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        if check and p.returncode != 0:
            raise AssertionError(f"vramtrace {' '.join(map(str, args))}: exit {p.returncode}\n"
                                 f"{p.stderr.decode(errors='replace')}")
        return p
    return vt


def run_named_test(namespace, name):
    """Run test_NAME from `namespace` (a script's globals()); an unknown name
    exits 2."""
    test = namespace.get("test_" + name)
    if not test:
        print(f"unknown test {name}")
        sys.exit(2)
    test()
    print("ok", name)
