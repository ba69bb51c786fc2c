"""Plots: matplotlib, imported only when a report draws (the GPU machine's python may lack it;
every module of occtools imports with the standard library alone)."""

from occtools.common.errors import Failure


def pyplot(required=True):
    """matplotlib.pyplot with the file-only Agg backend; None when it is missing and not REQUIRED."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        if required:
            raise Failure("matplotlib is not installed (apt-get install python3-matplotlib)", 3) from None
        return None
    return plt


def save(fig, path, dpi=120):
    fig.savefig(path, dpi=dpi, bbox_inches="tight")
    fig.clf()
    import matplotlib.pyplot as plt
    plt.close(fig)
