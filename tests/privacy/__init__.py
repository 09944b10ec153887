"""Independent recomputation of every guarantee edgedp prints.

Each test here rebuilds a number another way than the accountant does — brute force on a
tiny instance, the attacker's observation matrix written from the update equations, or the
update rules run on two adjacent inputs — and never calls the accountant's own helpers to
do it.
"""
