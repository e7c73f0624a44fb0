"""normbench: compare normalization layers with real training runs, and test claims about them on paired seeds.

    normbench train norm=ln model=rnn
    python -c "import normbench.norms as n; print(n.names())"
"""

__version__ = "0.1.0"
