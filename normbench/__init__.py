"""normbench: which normalization layer works, where, and why — answered with real training runs.

    normbench train norm=ln model=rnn
    python -c "import normbench.norms as n; print(n.names())"
"""

__version__ = "0.1.0"
