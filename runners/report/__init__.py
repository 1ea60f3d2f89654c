"""``morl report``: compare methods over runs and seeds -- aggregate scores with stratified-bootstrap
confidence intervals, per-task tables, probability of improvement, and plots (docs/report.md)."""
