"""harness.tools.train_reward: the committed train-reward table a write-up reads its train figures from."""
from types import SimpleNamespace

from harness.tools.train_reward import main, rows, summary, to_csv


def run(label, seed, rewards, skipped=(), trains=True, status="ok"):
    steps = [{"step": i + 1, "reward_mean": r, "extras": {"skipped": i + 1 in skipped}} for i, r in enumerate(rewards)]
    return SimpleNamespace(label=label, seed=seed, trains=trains, status=status, steps=steps)


def test_rows_keep_trained_ok_runs_and_their_steps():
    recs = [run("Original", 0, [], trains=False), run("ES", 0, [0.1, 0.2], skipped={2}),
            run("ES", 1, [0.3], status="failed")]
    assert rows(recs) == [{"label": "ES", "seed": 0, "step": 1, "reward_mean": 0.1, "skipped": False},
                          {"label": "ES", "seed": 0, "step": 2, "reward_mean": 0.2, "skipped": True}]


def test_summary_by_hand():
    """Rewards 0.1 .. 0.7: first 0.1, mean of the last 5 (0.3+0.4+0.5+0.6+0.7)/5 = 0.5, highest 0.7, 2 skipped."""
    table = rows([run("placebo", 2, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7], skipped={3, 4})])
    (s,) = summary(table)
    assert (s["label"], s["seed"], s["steps"], s["first"], s["highest"], s["skipped"]) == ("placebo", 2, 7, 0.1, 0.7, 2)
    assert abs(s["last5"] - 0.5) < 1e-12
    assert to_csv(table).splitlines()[0] == "label,seed,step,reward_mean,skipped"


def test_a_folder_without_records_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("esbench: error:") and len(err.strip().splitlines()) == 1
