"""Window parameters of the NEXMark queries, shared by the streaming queries and the batch reference."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConfigError


@dataclass(frozen=True)
class QueryParams:
    """Window sizes in whole seconds; the defaults are the ones docs/queries.md states."""

    window_size_s: int = 10
    window_slide_s: int = 2

    def __post_init__(self) -> None:
        if self.window_size_s <= 0 or self.window_slide_s <= 0:
            raise ConfigError(
                f"window size and slide must be positive, got {self.window_size_s}s/{self.window_slide_s}s",
                hint="pass --window-size and --window-slide as positive integers",
            )
        if self.window_size_s % self.window_slide_s:
            raise ConfigError(
                f"window size {self.window_size_s}s is not a multiple of the slide {self.window_slide_s}s",
                hint="pick a slide that divides the window size (panes need it)",
            )
