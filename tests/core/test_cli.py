import subprocess
import sys


def ncd(*args):
    return subprocess.run([sys.executable, "-m", "ncd.cli", *args], capture_output=True, text=True)


def test_plugins_lists_reference():
    r = ncd("plugins")
    assert r.returncode == 0 and "reference" in r.stdout and "backends:" in r.stdout


def test_explain_and_config_of_a_builtin():
    r = ncd("explain", "attention", "--bind", "q=3")
    assert r.returncode == 0
    assert "softmax: [x -> x] over (q)" in r.stdout and "bound size(s)" in r.stdout


def test_json_of_a_user_model(tmp_path):
    (tmp_path / "mymodel.py").write_text("from ncd import nn\nmodel = nn.mlp()\n")
    r = subprocess.run(
        [sys.executable, "-m", "ncd.cli", "json", "mymodel:model"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert r.returncode == 0 and '"ncd-graph"' in r.stdout


def test_errors_are_reported_without_traceback():
    r = ncd("explain", "nonexistent")
    assert r.returncode == 2 and "unknown model" in r.stderr and "Traceback" not in r.stderr
