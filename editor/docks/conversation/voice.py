"""The voice of GenerateAndSpeak replies, through Qt's text-to-speech, and its Mute toggle."""

from __future__ import annotations

from PySide6.QtWidgets import QToolButton, QWidget


def text_to_speech():
    """Qt's text-to-speech engine, or None where the platform has none (PySide6-Addons or
    its speech backend missing): then the dock simply has no voice."""
    try:
        from PySide6.QtTextToSpeech import QTextToSpeech
    except ImportError:
        return None
    try:
        if not QTextToSpeech.availableEngines():
            return None
        return QTextToSpeech()
    except Exception:  # noqa: BLE001 - a broken speech backend must not stop the editor
        return None


class Voice:
    """Speaks each sentence a Speak event hands it, unless muted; ``spoken`` keeps them, newest last."""

    def __init__(self, parent: QWidget) -> None:
        self.engine = text_to_speech()
        self.spoken: list[str] = []
        self.mute_button = QToolButton(parent)
        self.mute_button.setCheckable(True)
        self.mute_button.setText("Mute")
        if self.engine is None:
            self.mute_button.setEnabled(False)
            self.mute_button.setToolTip("No text-to-speech on this system (Qt TextToSpeech is not available): "
                                        "GenerateAndSpeak replies are shown, not spoken")
        else:
            self.mute_button.setToolTip("Mute the voice of GenerateAndSpeak replies")

    def speak(self, sentence: str) -> None:
        self.spoken.append(sentence)
        if self.engine is None or self.mute_button.isChecked():
            return
        enqueue = getattr(self.engine, "enqueue", None)
        (enqueue or self.engine.say)(sentence)

    def stop(self) -> None:
        if self.engine is not None:
            self.engine.stop()
