from distdoctor.redact import REDACTED, is_secret_name, redact


def test_secret_names():
    for name in ("HF_TOKEN", "WANDB_API_KEY", "AWS_SECRET_ACCESS_KEY", "DB_PASSWORD", "MY_PASSWD",
                 "GOOGLE_APPLICATION_CREDENTIALS", "ssh_key"):
        assert is_secret_name(name), name
    for name in ("NCCL_SOCKET_IFNAME", "MASTER_ADDR", "SLURM_JOB_ID", "PATH"):
        assert not is_secret_name(name), name


def test_nested_and_assignment_forms():
    value = {"env": {"HF_TOKEN": "abc", "RANK": "0"}, "lines": ["WANDB_API_KEY=xyz", "RANK=1"], "n": 3}
    assert redact(value) == {"env": {"HF_TOKEN": REDACTED, "RANK": "0"},
                             "lines": [f"WANDB_API_KEY={REDACTED}", "RANK=1"], "n": 3}


def test_empty_secret_is_left_empty_so_missing_values_stay_visible():
    assert redact({"HF_TOKEN": ""}) == {"HF_TOKEN": ""}
