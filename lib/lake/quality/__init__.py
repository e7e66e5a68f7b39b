"""The data-quality gate: great-expectations suites per table, row-local expectations judged with Arrow compute."""
