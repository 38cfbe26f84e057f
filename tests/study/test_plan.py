"""Study plans: the shipped plans load, runs are named and ordered, and every mistake in
a plan is one message naming the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from partf.cli.study import check_flags
from partf.study.paths import StudyPaths
from partf.study.plan import PlanError, load_plan
from partf.study.runner import train_args

STUDIES = Path(__file__).resolve().parents[2] / "studies"


@pytest.mark.parametrize("name", sorted(path.name for path in STUDIES.glob("*.toml")))
def test_shipped_plans_load_and_their_flags_parse(name):
    plan = load_plan(STUDIES / name)
    check_flags(plan)  # every run's flags as partf-train parses them
    runs = plan.runs()
    names = [run.name for run in runs]
    assert len(names) == len(set(names))
    assert plan.reference in {arm.name for arm in plan.arms}
    stage2 = [run for run in runs if run.after is not None]
    searches = {arm.name for arm in plan.arms if arm.stage2}
    assert {run.after for run in stage2} == {f"{a}-s{s}" for a in searches for s in plan.seeds}
    # Seed by seed, each stage 2 right after its search.
    assert [run.seed for run in runs] == sorted(run.seed for run in runs)
    for run in stage2:
        assert names.index(run.name) == names.index(run.after) + 1


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return path


GOOD = """
seeds = [3, 1]
reference = "a"
flags = "--d_model=16 --cutoffs=250 --cutoffs=2500"
[data]
train = "records/train"
[arms]
a = "--architecture='A D'"
[arms.b]
flags = ["--search=par", "--search_cost_weight=0.05"]
stage2 = true
stage2_flags = "--epochs=2"
"""


def test_runs_carry_shared_then_arm_flags_and_stage2_reads_the_search(tmp_path):
    plan = load_plan(write(tmp_path, GOOD))
    runs = {run.name: run for run in plan.runs()}
    assert list(runs) == ["a-s3", "b-s3", "b-stage2-s3", "a-s1", "b-s1", "b-stage2-s1"]
    assert runs["a-s1"].flags[-1] == "--architecture=A D"  # split as a shell would
    assert plan.arm_names() == ["a", "b", "b-stage2"]
    paths = StudyPaths(tmp_path / "out")
    args = train_args(plan, paths, runs["b-s1"])
    # Relative paths are the plan file's; valid and test left out are turned off.
    assert args[:3] == [
        f"--train_directory={tmp_path / 'records' / 'train'}",
        "--valid_directory=",
        "--test_directory=",
    ]
    assert args[3:] == [
        "--d_model=16",
        "--cutoffs=250",
        "--cutoffs=2500",
        "--search=par",
        "--search_cost_weight=0.05",
        "--seed=1",
        "--model_name=b-s1",
        f"--output_dir={tmp_path / 'out' / 'runs' / 'b-s1'}",
    ]
    assert train_args(plan, paths, runs["b-stage2-s1"]) == [
        f"--from_search={tmp_path / 'out' / 'runs' / 'b-s1' / 'checkpoints' / 'b-s1'}",
        "--model_name=b-stage2-s1",
        f"--output_dir={tmp_path / 'out' / 'runs' / 'b-stage2-s1'}",
        "--epochs=2",
    ]


def test_environment_variables_expand_with_defaults(tmp_path, monkeypatch):
    text = GOOD.replace('"records/train"', '"${STUDY_ROOT:-/fallback}/train"')
    monkeypatch.delenv("STUDY_ROOT", raising=False)
    assert load_plan(write(tmp_path, text)).data.records["train"] == "/fallback/train"
    monkeypatch.setenv("STUDY_ROOT", str(tmp_path / "elsewhere"))
    assert load_plan(write(tmp_path, text)).data.records["train"] == str(
        tmp_path / "elsewhere" / "train"
    )


def test_text_data_takes_the_build_settings(tmp_path):
    text = GOOD.replace('train = "records/train"', 'text = "corpus"\nseq_len = 256\nbatch_size = 8')
    data = load_plan(write(tmp_path, text)).data
    assert (data.records, data.text, data.batch_size, data.seq_len) == (
        None,
        str(tmp_path / "corpus"),
        8,
        256,
    )


@pytest.mark.parametrize(
    "change, expected",
    [
        (("seeds = [3, 1]", "seeds = [3, 3]"), "seeds must be a list of distinct"),
        (("seeds = [3, 1]", "seds = [3]"), "unknown key 'seds' in the plan; valid keys"),
        (('reference = "a"', 'reference = "z"'), "reference 'z' is not an arm"),
        (("[arms]", "[arms]\nc = '--seed=4'"), "--seed is set by partf-study"),
        (("[arms]", "[arms]\nc = 'architecture=A'"), "is not a --flag"),
        (("[arms]", "[arms]\nc = { flag = '--search=par' }"), "unknown key 'flag' in [arms.c]"),
        (("[arms]", "[arms]\n'c d' = '--search=par'"), "arm name 'c d'"),
        (('train = "records/train"', 'train = "$NO_SUCH_VARIABLE_X/t"'), "NO_SUCH_VARIABLE_X"),
        (('train = "records/train"', 'valid = "v"'), "[data] needs `train`"),
        (("[arms]", "[arms"), "not valid TOML"),
        (('flags = "--d_model=16', "flags = \"--d_model='16"), "check its quotes"),
    ],
)
def test_mistakes_are_one_line_naming_the_fix(tmp_path, change, expected):
    with pytest.raises(PlanError) as raised:
        load_plan(write(tmp_path, GOOD.replace(*change)))
    message = str(raised.value)
    assert expected in message
    assert "\n" not in message and str(tmp_path / "plan.toml") in message


def test_a_mistyped_flag_fails_before_any_run(tmp_path):
    plan = load_plan(write(tmp_path, GOOD.replace("--search_cost_weight", "--search_cost_wieght")))
    with pytest.raises(PlanError, match=r"arm b: unrecognized arguments: --search_cost_wieght"):
        check_flags(plan)


def test_a_missing_plan_file(tmp_path):
    with pytest.raises(PlanError, match="does not exist"):
        load_plan(tmp_path / "none.toml")


CONVERSIONS = """
seeds = [0, 1]
reference = "txl"
[data]
train = "records/train"
[arms]
txl = "--architecture='A D'"
[arms.conv]
init_from = "txl"
flags = "--architecture='A|I D|I' --search=par"
stage2 = true
stage2_init = true
matched = "ft"
[arms.ft]
init_from = "txl"
flags = "--architecture='A D'"
[arms.small]
flags = "--architecture='A'"
control = true
"""


def test_a_conversion_starts_from_the_same_seed_of_its_source(tmp_path):
    from partf.cli.study import with_needed

    plan = load_plan(write(tmp_path, CONVERSIONS))
    runs = {run.name: run for run in plan.runs()}
    assert runs["conv-s1"].init_from == "txl-s1" and runs["conv-s1"].needs == ("txl-s1",)
    stage2 = runs["conv-stage2-s1"]
    assert stage2.after == "conv-s1" and stage2.init_from == "conv-s1"
    assert plan.control_arms() == ["small"]
    assert plan.matched_arms() == {"conv": "ft"}
    assert plan.conversion_arms() == {"conv": "txl", "conv-stage2": "txl", "ft": "txl"}
    paths = StudyPaths(tmp_path / "out")
    args = train_args(plan, paths, stage2)
    assert f"--init_from={paths.checkpoints('conv-s1')}" in args
    assert args[0] == f"--from_search={paths.checkpoints('conv-s1')}"
    assert f"--init_from={paths.checkpoints('txl-s0')}" in train_args(plan, paths, runs["conv-s0"])
    # Asking for the conversion alone brings in the run it starts from.
    picked = with_needed([runs["conv-stage2-s0"]], plan.runs())
    assert [run.name for run in picked] == ["txl-s0", "conv-s0", "conv-stage2-s0"]


@pytest.mark.parametrize(
    ("arm", "message"),
    [
        ('init_from = "nope"', "init_from 'nope' is not another arm"),
        ('init_from = "x"', "init_from 'x' is not another arm"),
        ("stage2_init = true", "stage2_init needs stage2 = true"),
        ('control = "yes"', "control must be true or false"),
        ('init_from = "conv"', "which itself starts from txl"),
        ('matched = "nope"', "matched 'nope' is not another arm"),
        ('matched = "x"', "matched 'x' is not another arm"),
        ("matched = 3", "matched must name an arm"),
    ],
)
def test_bad_conversion_keys_are_refused(tmp_path, arm, message):
    with pytest.raises(PlanError, match=message):
        load_plan(write(tmp_path, CONVERSIONS + f"[arms.x]\nflags = ''\n{arm}\n"))


RECALL_HEAD = """
seeds = [0]
flags = "--d_model=16"
"""
MQAR = """
[mqar]
seq_len = 64
batch_size = 8
pairs = [4, 8]
eval_pairs = 8
"""
RECALL_ARMS = """
[arms]
soft = { task = "mqar", flags = "--architecture='A D'" }
"""


def test_recall_arms_read_the_studys_mqar_splits_and_need_no_text(tmp_path):
    plan = load_plan(write(tmp_path, RECALL_HEAD + MQAR + RECALL_ARMS))
    assert plan.data is None and plan.tasks["mqar"]["pairs"] == [4, 8]
    paths = StudyPaths(tmp_path / "out")
    (run,) = plan.runs()
    args = train_args(plan, paths, run)
    base = tmp_path / "out" / "data" / "mqar" / "mqar"
    for split in ("train", "valid", "test"):
        assert f"--{split}_directory={base}_{split}" in args
    assert not any(a.startswith("--sp_model_prefix") for a in args)


def test_a_plan_mixing_text_and_recall_arms_gives_each_its_data(tmp_path):
    extra = '[arms.r]\ntask = "mqar"\nflags = "--architecture=\'A D\'"\n'
    plan = load_plan(write(tmp_path, GOOD + extra + MQAR))
    runs = {run.name: run for run in plan.runs()}
    paths = StudyPaths(tmp_path / "out")
    assert runs["r-s1"].task == "mqar" and runs["a-s1"].task == "text"
    assert any("mqar_train" in a for a in train_args(plan, paths, runs["r-s1"]))
    assert not any("mqar" in a for a in train_args(plan, paths, runs["a-s1"]))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('task = "mqar"', r"has no \[mqar\] table"),
        ('task = "vision"', r"task must be one of text, .*mqar, .*text\+mqar, not 'vision'"),
        ('task = "text+mqar"', r"arm r has task = 'text\+mqar' but the plan has no \[mqar\]"),
    ],
)
def test_bad_task_keys_are_refused(tmp_path, change, message):
    with pytest.raises(PlanError, match=message):
        load_plan(write(tmp_path, GOOD + f"[arms.r]\nflags = ''\n{change}\n"))


TEXT_AND_RECALL = """
seeds = [2]
flags = "--d_model=16 --mix_every=2"
[data]
text = "corpus"
batch_size = 8
seq_len = 64
sp_model_prefix = "tokenizer/spm"
[mqar]
seq_len = 64
batch_size = 8
vocab_size = 64
pairs = [4, 8]
[arms]
both = { task = "text+mqar", flags = "--architecture='A D'", stage2 = false }
text = "--architecture='A D'"
"""


def test_text_and_recall_arms_train_on_the_text_with_the_mqar_splits_mixed_in(tmp_path):
    plan = load_plan(write(tmp_path, TEXT_AND_RECALL))
    runs = {run.name: run for run in plan.runs()}
    assert runs["both-s2"].task == "text+mqar" and plan.data.text == str(tmp_path / "corpus")
    paths = StudyPaths(tmp_path / "out")
    args = train_args(plan, paths, runs["both-s2"])
    data, mqar = tmp_path / "out" / "data", tmp_path / "out" / "data" / "mqar" / "mqar"
    # The text's records and tokenizer, the MQAR training split mixed in, its test split
    # scored, then the shared and the arm's flags.
    assert args == [
        *(
            f"--{split}_directory={data / 'records'}_{split}"
            for split in ("train", "valid", "test")
        ),
        f"--sp_model_prefix={tmp_path / 'tokenizer' / 'spm'}",
        f"--mix_directory={mqar}_train",
        f"--recall_directory={mqar}_test",
        "--d_model=16",
        "--mix_every=2",
        "--architecture=A D",
        "--seed=2",
        "--model_name=both-s2",
        f"--output_dir={tmp_path / 'out' / 'runs' / 'both-s2'}",
    ]
    assert not any("mqar" in a for a in train_args(plan, paths, runs["text-s2"]))


def test_text_and_recall_arms_need_the_mqar_rows_of_the_text(tmp_path):
    text = TEXT_AND_RECALL.replace("[mqar]\nseq_len = 64", "[mqar]\nseq_len = 32")
    with pytest.raises(PlanError) as raised:
        load_plan(write(tmp_path, text))
    assert str(raised.value).endswith(
        "arm both mixes [mqar] batches of 8x32 into [data] batches of 8x64; give [mqar] "
        "the batch_size and seq_len of [data]."
    )


def test_a_stage_2_or_conversion_of_a_text_and_recall_arm_keeps_its_data(tmp_path):
    """A stage 2 reads its search's settings (the MQAR folders among them, as partf-train
    --from_search takes them); a conversion of the arm is given them again."""
    extra = (
        'search = { task = "text+mqar", flags = "--search=par", stage2 = true }\n'
        'conv = { task = "text+mqar", init_from = "both", matched = "both", flags = "" }\n'
    )
    plan = load_plan(write(tmp_path, TEXT_AND_RECALL + extra))
    runs = {run.name: run for run in plan.runs()}
    paths = StudyPaths(tmp_path / "out")
    stage2 = train_args(plan, paths, runs["search-stage2-s2"])
    assert stage2[0] == f"--from_search={paths.checkpoints('search-s2')}"
    assert not any(a.startswith(("--mix_directory", "--train_directory")) for a in stage2)
    conv = train_args(plan, paths, runs["conv-s2"])
    assert f"--init_from={paths.checkpoints('both-s2')}" in conv
    assert any(a.startswith("--mix_directory=") for a in conv)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ("seq_len = 64\nbatch_size = 8", "needs pairs"),
        ("seq_len = 64\nbatch_size = 8\npairs = [4, 0]", "pairs must be positive"),
        ("seq_len = 64\nbatch_size = 8\npairs = 4\nwidth = 3", "unknown key 'width'"),
        ("seq_len = 'long'\nbatch_size = 8\npairs = 4", "seq_len must be an integer"),
    ],
)
def test_bad_mqar_tables_are_refused(tmp_path, table, message):
    text = RECALL_HEAD + "[mqar]\n" + table + "\n" + RECALL_ARMS
    with pytest.raises(PlanError, match=message):
        load_plan(write(tmp_path, text))


def test_the_recall_plans_search_never_holds_identity_and_keeps_its_dense_blocks():
    from partf.models.config import parse_block_candidates

    plan = load_plan(STUDIES / "recall_mqar.toml")
    for arm in plan.arms:
        flag = next((f for f in arm.flags if f.startswith("--architecture=")), None)
        if flag is None:  # a selection: its source's blocks, with some converted
            assert any(f.startswith("--drop_attention=") for f in arm.flags), arm.name
            continue
        blocks = parse_block_candidates(flag.split("=", 1)[1])
        assert all("identity" not in block for block in blocks), arm.name
        assert blocks[1::2] == (("dense",),) * 4, arm.name
        assert all("dense" not in block for block in blocks[0::2]), arm.name
