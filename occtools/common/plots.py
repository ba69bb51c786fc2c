"""Plots: matplotlib, imported only when a report draws (the GPU machine's python may lack it;
every module of occtools imports with the standard library alone)."""

import sys

from occtools.common.errors import Failure


def pyplot(required=False):
    """matplotlib.pyplot with the file-only Agg backend. Where it is missing: None, after a note
    (a report's tables never wait on its plot), or Failure when REQUIRED."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        why = (f"{sys.executable} has no matplotlib (apt-get install python3-matplotlib, and run Debian's "
               "/usr/bin/python3 -m occtools)")
        if required:
            raise Failure(why, 3) from None
        print(f"note: no plot: {why}", flush=True)
        return None
    return plt


def save(fig, path, dpi=120):
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    fig.clf()
    import matplotlib.pyplot as plt
    plt.close(fig)
