"""Δm% against the published numbers it must reproduce (MoCo Table 6; JoGBa Tables 1-2 Random rows)."""

import pytest

from morl.metrics import delta_m

# NYU-v2: mIoU↑ PixAcc↑ AbsErr↓ RelErr↓ Mean↓ Median↓ 11.25↑ 22.5↑ 30↑
NYU_HIB = [True, True, False, False, False, False, True, True, True]
NYU_STL = [38.30, 63.76, 0.6754, 0.2780, 25.01, 19.21, 30.14, 57.20, 69.15]

# MoCo Table 6 (Fernando et al., arXiv:2210.12624; NYU-v2): rows and the reported Δm column.
MOCO_TABLE6 = [
    ([38.06, 64.64, 0.5550, 0.2325, 27.41, 22.80, 23.86, 49.83, 63.14], 3.97),  # PCGrad
    ([39.79, 65.49, 0.5486, 0.2250, 26.31, 21.58, 25.61, 52.36, 65.58], 0.20),  # CAGrad
    ([40.30, 66.07, 0.5575, 0.2135, 26.67, 21.83, 25.61, 51.78, 64.85], 0.16),  # MoCo
    ([38.80, 65.02, 0.5492, 0.2326, 27.39, 22.75, 23.64, 49.89, 63.21], 3.62),  # PCGrad + MoCo
    ([39.58, 65.49, 0.5535, 0.2292, 25.97, 20.86, 26.84, 53.79, 66.65], -0.97),  # CAGrad + MoCo
]


@pytest.mark.parametrize("row,reported", MOCO_TABLE6)
def test_moco_table6_delta_m_within_0_02(row, reported):
    assert delta_m(row, NYU_STL, NYU_HIB) == pytest.approx(reported, abs=0.02)


# JoGBa Table 1 (NYU-v2) Random rows whose Δm this formula reproduces, ±0.3.
JOGBA_NYU_RANDOM = [
    ([38.06, 64.64, 0.5550, 0.2325, 27.41, 22.80, 23.86, 49.83, 63.14], 3.97),  # PCGrad
    ([39.79, 65.49, 0.5486, 0.2250, 26.31, 21.58, 25.61, 52.36, 65.58], 0.20),  # CAGrad
    ([40.13, 65.93, 0.5261, 0.2171, 25.26, 20.08, 28.40, 55.47, 68.15], -4.04),  # Nash-MTL
]
# QM9 (11 MAEs, all lower-is-better) with the Nash-MTL base vector.
QM9_BASE = [0.0671, 0.1814, 60.576, 53.915, 0.5027, 4.539, 58.838, 64.244, 63.852, 66.223, 0.07212]
JOGBA_QM9_RANDOM = [
    ([0.217, 0.368, 126.8, 104.6, 3.22, 5.69, 88.37, 89.40, 89.32, 88.01, 0.120], 120.5),  # MGDA
    ([0.106, 0.293, 75.85, 88.33, 3.94, 9.15, 116.36, 116.8, 117.2, 114.5, 0.110], 125.7),  # PCGrad
    ([0.118, 0.321, 83.51, 94.81, 3.21, 6.93, 113.99, 114.3, 114.5, 112.3, 0.116], 112.8),  # CAGrad
    ([0.102, 0.248, 82.95, 81.89, 2.42, 5.38, 74.50, 75.02, 75.10, 74.16, 0.093], 62.0),  # Nash-MTL
]


@pytest.mark.parametrize("row,reported", JOGBA_NYU_RANDOM)
def test_jogba_nyu_random_rows(row, reported):
    assert delta_m(row, NYU_STL, NYU_HIB) == pytest.approx(reported, abs=0.3)


@pytest.mark.parametrize("row,reported", JOGBA_QM9_RANDOM)
def test_jogba_qm9_random_rows(row, reported):
    assert delta_m(row, QM9_BASE, [False] * 11) == pytest.approx(reported, abs=0.3)


def test_metric_average_differs_from_task_average():
    # Averaging over the 3 NYU tasks (each task's metrics first) gives a different number:
    # evidence that published Δm averages over metric columns.
    row, reported = MOCO_TABLE6[4]
    groups = [range(0, 2), range(2, 4), range(4, 9)]
    per_task = [delta_m([row[i] for i in g], [NYU_STL[i] for i in g], [NYU_HIB[i] for i in g]) for g in groups]
    assert abs(sum(per_task) / 3 - reported) > 0.5


def test_mapping_form_and_direction_mask():
    base = {"acc": 0.8, "mse": 2.0}
    hib = {"acc": True, "mse": False}
    # acc +10% (better), mse +10% (worse): they cancel.
    assert delta_m({"acc": 0.88, "mse": 2.2}, base, hib) == pytest.approx(0.0, abs=1e-12)
    assert delta_m({"acc": 0.88, "mse": 1.8}, base, hib) == pytest.approx(-10.0)
    assert delta_m({"acc": 0.88, "mse": 1.8, "extra": 5}, base, hib, metrics=["acc"]) == pytest.approx(-10.0)
    assert delta_m(base, base, hib) == 0.0


@pytest.mark.parametrize(
    "values,baseline,hib,match",
    [
        ([1.0], [0.0], [True], "is 0"),
        ([1.0, 2.0], [1.0], [True], "equal lengths"),
        ({"a": 1.0}, {"b": 1.0}, {"a": True}, "baseline lacks"),
        ([float("nan")], [1.0], [True], "finite"),
        ([], [], [], "at least one"),
    ],
)
def test_bad_input_names_the_problem(values, baseline, hib, match):
    with pytest.raises(ValueError, match=match):
        delta_m(values, baseline, hib)
