"""Where tasks come from and how they are judged: suites and checkers, corpora, games, the
simulated world, the sandbox."""
