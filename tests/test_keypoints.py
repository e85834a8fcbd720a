"""Pose keypoints: decode equal to Ultralytics' own post-processing, OKS scoring checked on hand-made and real
COCO8-pose labels (a keypoint with visibility 0, an image without instances)."""

import json
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from qgate.cocoeval import coco_map
from qgate.dataset import read_keypoints
from qgate.errors import QgateError
from qgate.heads import Postprocess, RawHead
from qgate.keypoints import COCO_SIGMAS, sigmas
from qgate.preprocess import Letterbox
from qgate.tasks import Pose
from tests.test_reference import REFERENCE

KPT_SHAPE = (17, 3)


def _raw_output(rng, anchors=40, imgsz=320):
    """A raw pose head output [4 + 1 + 51, anchors]: spread boxes, one class, keypoints in input pixels."""
    centres = rng.uniform(40, imgsz - 40, size=(2, anchors))
    sizes = rng.uniform(10, 30, size=(2, anchors))
    scores = rng.uniform(0, 1, size=(1, anchors))
    points = np.stack([rng.uniform(0, imgsz, (17, anchors)), rng.uniform(0, imgsz, (17, anchors)),
                       rng.uniform(0, 1, (17, anchors))], axis=1).reshape(51, anchors)
    return np.concatenate([centres, sizes, scores, points]).astype(np.float32)


def test_pose_predictions_equal_ultralytics_nms_and_scale_coords():
    torch = pytest.importorskip("torch")
    from ultralytics.utils import nms, ops

    output = _raw_output(np.random.default_rng(0))
    hw0, hw, pad = (480, 640), (240, 320), (0, 40)
    ours = Pose(RawHead(51), KPT_SHAPE).predictions((output,), Postprocess(conf=0.25), 5, Letterbox(hw0, hw, pad))
    theirs = nms.non_max_suppression(torch.from_numpy(output[None]), 0.25, 0.7, multi_label=True, max_det=300,
                                     nc=1)[0]
    points = ops.scale_coords((320, 320), theirs[:, 6:].reshape(-1, 17, 3).clone(), hw0,
                              ratio_pad=((hw[0] / hw0[0], hw[1] / hw0[1]), pad)).numpy()
    assert len(ours) == len(theirs) > 3
    by_score = sorted(ours, key=lambda d: -d["score"])
    order = np.argsort(-theirs[:, 4].numpy(), kind="stable")
    for mine, k in zip(by_score, order):
        np.testing.assert_allclose(np.array(mine["keypoints"]).reshape(17, 3), points[k], atol=2e-3)
        assert mine["image_id"] == 5 and mine["category_id"] == 1


def _person(tmp_path, values: np.ndarray) -> None:
    (tmp_path / "labels").mkdir(exist_ok=True)
    (tmp_path / "images").mkdir(exist_ok=True)
    line = "0 0.5 0.5 0.4 0.8 " + " ".join(f"{v:.6f}" for v in values.ravel())
    (tmp_path / "labels" / "a.txt").write_text(line + "\n")


def _pose_task(folder, own_sigmas: list[float] | None) -> Pose:
    """The pose task as the export record builds it, judged on a dataset yaml with or without its own sigmas."""
    yaml_path = folder / "pose.yaml"
    yaml_path.write_text(yaml.safe_dump({"names": ["person"]} | ({"kpt_oks_sigmas": own_sigmas} if own_sigmas else {})))
    fields = Pose.export_fields([], SimpleNamespace(model=SimpleNamespace(kpt_shape=list(KPT_SHAPE))), yaml_path)
    return Pose.from_record(json.loads(json.dumps(fields)), RawHead)  # through the record's JSON


@pytest.mark.parametrize("own_sigmas", [None, (COCO_SIGMAS * 0.7).tolist()], ids=["coco", "dataset_yaml"])
def test_oks_mean_ap_counts_only_labelled_keypoints_and_ignores_an_empty_image(tmp_path, own_sigmas):
    rng = np.random.default_rng(1)
    points = np.c_[rng.uniform(0.35, 0.65, 17), rng.uniform(0.15, 0.85, 17), np.full(17, 2.0)]
    points[3] = [0.0, 0.0, 0.0]  # an unlabelled keypoint: never compared
    _person(tmp_path, points)
    task = _pose_task(tmp_path, own_sigmas)
    shapes = [(200, 100), (200, 100)]
    truth = task.ground_truth([tmp_path / "images/a.jpg", tmp_path / "images/b.jpg"], shapes, ("person",))
    assert truth["annotations"][0]["num_keypoints"] == 16 and len(truth["annotations"]) == 1
    guess = points[:, :2] * [100, 200] + rng.normal(0, 1.5, (17, 2))
    guess[3] = [99, 199]  # far from the unlabelled keypoint's (0, 0): must not matter
    area = 40 * 160 * 0.53
    labelled = np.arange(17) != 3
    d2 = ((guess - points[:, :2] * [100, 200]) ** 2).sum(1)

    def mean_ap(sigmas: np.ndarray) -> float:
        oks = np.exp(-d2 / ((2 * sigmas) ** 2 * 2 * area))[labelled].mean()
        return np.mean([oks >= t for t in np.linspace(0.5, 0.95, 10)])

    expected = mean_ap(np.array(own_sigmas) if own_sigmas else COCO_SIGMAS)
    assert own_sigmas is None or expected != mean_ap(COCO_SIGMAS)  # the dataset's sigmas change the score
    pose = {"image_id": 0, "category_id": 1, "bbox": [30, 20, 40, 160], "score": 0.9,
            "keypoints": np.c_[guess, np.ones(17)].ravel().tolist()}
    stray = {**pose, "image_id": 1, "score": 0.1}  # a detection on the image without instances, scored last
    assert 0 < expected < 1  # a test of something: some thresholds pass, some fail
    assert coco_map(truth, [dict(pose), dict(stray)], "keypoints")[0] == pytest.approx(expected)
    metrics, _ = task.score(truth, [dict(pose), dict(stray)])  # the task's own scoring, keyed by its vocabulary
    assert list(metrics) == ["map50_95", "map50", "pose_map50_95", "pose_map50"]
    assert metrics["pose_map50_95"] == pytest.approx(expected) and metrics["map50_95"] == pytest.approx(1.0)
    assert task.match([pose], [pose], 0.5) == [1.0]


def test_sigmas_follow_ultralytics_rule():
    assert sigmas((17, 3)) is COCO_SIGMAS
    np.testing.assert_allclose(sigmas((4, 2)), [0.25] * 4)


@pytest.mark.parametrize("own_sigmas", [[0.5] * 16, [0.5] * 16 + [0], "0.5"])
def test_a_dataset_yaml_s_sigmas_that_do_not_fit_the_keypoints_are_a_one_line_error(tmp_path, own_sigmas):
    with pytest.raises(QgateError, match=r"pose.yaml: kpt_oks_sigmas must be 17 positive numbers") as error:
        _pose_task(tmp_path, own_sigmas)
    assert "\n" not in str(error.value)


@pytest.mark.skipif(not (REFERENCE / "data" / "coco8-pose").exists(), reason=f"no COCO8-pose at {REFERENCE}")
def test_real_coco8_pose_labels_score_themselves_perfectly():
    import cv2

    images = sorted((REFERENCE / "data" / "coco8-pose" / "images" / "val").glob("*.jpg"))
    shapes = [cv2.imread(str(p)).shape[:2] for p in images]
    instances = [read_keypoints(REFERENCE / "data/coco8-pose/labels/val" / f"{p.stem}.txt", 1, KPT_SHAPE)
                 for p in images]
    assert sum(map(len, instances)) > 2
    assert any((points[:, 2] == 0).any() for image in instances for _, _, points in image)  # unlabelled ones
    truth = Pose(RawHead(51), KPT_SHAPE).ground_truth(images, shapes, ("person",))
    itself = [{"image_id": a["image_id"], "category_id": 1, "bbox": a["bbox"], "score": 1.0,
               "keypoints": a["keypoints"]} for a in truth["annotations"] if a["num_keypoints"]]
    assert coco_map(truth, itself, "keypoints")[:2] == pytest.approx((1.0, 1.0))


def test_the_detection_error_of_a_pose_model_sees_keypoints_that_move_while_boxes_hold():
    output = _raw_output(np.random.default_rng(2), anchors=6)
    output[4] = 0.9  # every anchor confident
    output[7::3] = 1.0  # every keypoint visible
    moved = output.copy()
    moved[5::3] += 25  # every keypoint 25 px to the right; boxes and scores untouched
    task = Pose(RawHead(51), KPT_SHAPE)
    mask = task.confident((output,), 0.25)
    assert task.detection_error((output,), (output,), mask) == 0
    assert task.box_error((moved,), (output,), mask) == 0
    assert task.detection_error((moved,), (output,), mask) > 3  # six poses, most of their OKS lost
