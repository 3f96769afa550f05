#!/usr/bin/env python3
"""Writes scikit-learn's handwritten digits (load_digits: 1797 8x8 images,
shipped inside the scikit-learn package, nothing downloaded) as a trainer
tensor file: train_x/test_x float32 [N, 64] scaled to [0, 1], train_y/test_y
int64, split 80/20 by a fixed permutation (numpy RandomState(0)).

usage: export_digits.py OUT.ptf"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tensor_file  # noqa: E402

try:
    import numpy as np
    from sklearn.datasets import load_digits
except Exception as e:
    print(f"export_digits: scikit-learn is not importable here ({e}); "
          "scripts/install-torch.sh installs it into .venv", file=sys.stderr)
    sys.exit(77)

digits = load_digits()
x = (digits.data / 16.0).astype("<f4")
y = digits.target.astype("<i8")
order = np.random.RandomState(0).permutation(len(y))
n_train = int(len(y) * 0.8)
train, test = order[:n_train], order[n_train:]
arrays = []
for name, idx in (("train", train), ("test", test)):
    arrays.append((f"{name}_x", "float32", [len(idx), 64], np.ascontiguousarray(x[idx]).tobytes()))
    arrays.append((f"{name}_y", "int64", [len(idx)], np.ascontiguousarray(y[idx]).tobytes()))
tensor_file.write(sys.argv[1], arrays)
print(f"export_digits: {sys.argv[1]}: {len(train)} train, {len(test)} test images of 8x8")
