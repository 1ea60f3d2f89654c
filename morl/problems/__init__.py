"""Test problems with known answers (CAGrad/MoCo toy, EPO synthetic problems)."""
