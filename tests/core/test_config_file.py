"""`sponge.toml`: the data plane's settings, under the flags, with errors that name the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.cli.options import offload_config
from core.config_file import DataPlane, load
from core.errors import ConfigError


def test_the_files_settings_apply_and_a_flag_wins(tmp_path: Path) -> None:
    path = tmp_path / "sponge.toml"
    path.write_text('[data_plane]\nbind = "0.0.0.0"\nadvertise = "10.0.3.7"\ntransport = "mtls"\n')
    assert load(path) == DataPlane("0.0.0.0", "10.0.3.7", "mtls")
    offload = offload_config(0.5, None, "embedded", [], transport="tls", settings=path)
    assert offload is not None
    assert (offload.bind, offload.advertise, offload.transport) == ("0.0.0.0", "10.0.3.7", "tls")


def test_the_files_own_certificates_reach_the_run_checked(tmp_path: Path) -> None:
    from tests.core.wire.test_run_pki import own_pki

    mine = own_pki(tmp_path / "tls", ("10.0.3.7",))
    path = tmp_path / "sponge.toml"
    path.write_text(f'[data_plane]\nadvertise = "10.0.3.7"\ntls_dir = "{mine}"\n')
    offload = offload_config(0.5, None, "embedded", [], settings=path)
    assert offload is not None and offload.tls_dir == mine and offload.transport == "tls"
    with pytest.raises(ConfigError, match="does not name"):
        offload_config(0.5, None, "embedded", [], advertise="10.0.3.8", settings=path)


def test_without_a_file_nothing_is_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert load(None) == DataPlane()
    (tmp_path / "sponge.toml").write_text('[data_plane]\ntransport = "plaintext"\n')
    assert load(None) == DataPlane(transport="plaintext")  # ./sponge.toml is the default


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("[data_plane\n", "is not TOML"),
        ("[dataplane]\nbind = '0.0.0.0'\n", "unknown tables ['dataplane']"),
        ("[data_plane]\nport = 5\n", "port"),
        ("[data_plane]\nbind = 0\n", "bind"),
    ],
)
def test_a_bad_file_names_itself_and_what_is_wrong(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "sponge.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=str(path)) as e:
        load(path)
    assert needle in e.value.message


def test_a_missing_file_given_on_purpose_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no configuration file"):
        load(tmp_path / "nope.toml")
