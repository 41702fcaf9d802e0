"""Step-level text of a converted UI episode: the one list of its names and the one reader of its values.

A step's texts are the action's `instruction` (AndroidControl `step_instructions`, GUI-Odyssey `ps`) and the
named fields of `StepInfo.text` (Android-in-the-Zoo's chain-of-action-thought texts). The annotator shows
them beside the step, exporters write each as a named column/feature, and study fields take them as
suggestions: all through `step_texts`, so a new text is added here and in the proto, nowhere else.
"""

from __future__ import annotations

from protos.stepmark import ui_episode_pb2

#: Names of the step texts, in display and export order. "instruction" is `Action.instruction`; the others
#: are the fields of `StepText` with the same names.
STEP_TEXT_FIELDS: tuple[str, ...] = (
    "instruction",
    "screen_description",
    "action_thought",
    "action_description",
    "action_result",
)


def step_texts(episode: ui_episode_pb2.UiEpisode, index: int) -> dict[str, str]:
    """The texts of step `index` (every name in STEP_TEXT_FIELDS, "" where the trace has none)."""
    out = dict.fromkeys(STEP_TEXT_FIELDS, "")
    if 0 <= index < len(episode.actions):
        out["instruction"] = episode.actions[index].instruction
    if 0 <= index < len(episode.step_info):
        text = episode.step_info[index].text
        for name in STEP_TEXT_FIELDS[1:]:
            out[name] = getattr(text, name)
    return out
