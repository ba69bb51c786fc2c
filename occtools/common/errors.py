"""The one way an occtools command refuses: raise Failure("what is wrong; the fix"), and
`python3 -m occtools` prints `error: ...` on one line and exits with its status (2: bad
input or usage, 1: a run failed, 3: the machine cannot do it)."""


class Failure(Exception):
    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


def positive_int(text):
    """argparse type: a whole number >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        import argparse
        raise argparse.ArgumentTypeError(f"{text!r}: use a whole number >= 1")
    return n


def words(text):
    """argparse type: a space- or comma-separated list ("1234 4321", "a,b")."""
    return [w for w in text.replace(",", " ").split() if w]
