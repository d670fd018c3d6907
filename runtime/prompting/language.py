"""The agent's language (``Asset.language``, a BCP 47 tag such as ``de`` or ``pt-BR``) as its prompts say it.

A tag reaches the prompts two ways (docs/localisation.md):

- a player-facing node (Generate, Generate and Speak) ends its system prompt with ``answer_line``:
  "Answer in German.", so a reply is in the agent's language whatever language the player writes in;
- every template a prompt-building node renders reads ``{{language}}`` (the language's English name,
  "German") and ``{{language_tag}}`` (the tag as written, "de-AT").

Models read an English name better than a tag, so tags name their language from ``LANGUAGE_NAMES``
(and their region from ``REGION_NAMES``); a tag whose language is not listed is said as it is written.
"""

from __future__ import annotations

import re

# language[-script][-region][-variant...]: the part of BCP 47 (RFC 5646) a game's locales use.
LANGUAGE_TAG = r"^[A-Za-z]{2,3}(-[A-Za-z]{4})?(-([A-Za-z]{2}|[0-9]{3}))?(-([A-Za-z0-9]{5,8}|[0-9][A-Za-z0-9]{3}))*$"
OPTIONAL_LANGUAGE_TAG = f"^({LANGUAGE_TAG[1:-1]})?$"  # no language, or a tag (the JSON schema's pattern)
MAX_TAG_CHARS = 35  # RFC 5646's longest tag a language and its subtags make

LANGUAGE_NAMES = {
    "af": "Afrikaans", "ar": "Arabic", "bg": "Bulgarian", "bn": "Bengali", "ca": "Catalan", "cs": "Czech",
    "cy": "Welsh", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "et": "Estonian", "eu": "Basque", "fa": "Persian", "fi": "Finnish", "fil": "Filipino", "fr": "French",
    "ga": "Irish", "gl": "Galician", "he": "Hebrew", "hi": "Hindi", "hr": "Croatian", "hu": "Hungarian",
    "hy": "Armenian", "id": "Indonesian", "is": "Icelandic", "it": "Italian", "ja": "Japanese",
    "ka": "Georgian", "kk": "Kazakh", "ko": "Korean", "la": "Latin", "lt": "Lithuanian", "lv": "Latvian",
    "mk": "Macedonian", "ms": "Malay", "mt": "Maltese", "nb": "Norwegian Bokmål", "nl": "Dutch",
    "nn": "Norwegian Nynorsk", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "sk": "Slovak", "sl": "Slovenian", "sq": "Albanian", "sr": "Serbian", "sv": "Swedish",
    "sw": "Swahili", "ta": "Tamil", "th": "Thai", "tl": "Tagalog", "tr": "Turkish", "uk": "Ukrainian",
    "ur": "Urdu", "vi": "Vietnamese", "zh": "Chinese",
}
REGION_NAMES = {
    "419": "Latin America", "AR": "Argentina", "AT": "Austria", "AU": "Australia", "BE": "Belgium",
    "BR": "Brazil", "CA": "Canada", "CH": "Switzerland", "CN": "China", "DE": "Germany", "ES": "Spain",
    "FR": "France", "GB": "United Kingdom", "HK": "Hong Kong", "IE": "Ireland", "IN": "India", "IT": "Italy",
    "JP": "Japan", "KR": "Korea", "MX": "Mexico", "NL": "Netherlands", "NZ": "New Zealand", "PT": "Portugal",
    "RU": "Russia", "TW": "Taiwan", "US": "United States",
}
SCRIPT_NAMES = {"Hans": "Simplified", "Hant": "Traditional", "Latn": "Latin script", "Cyrl": "Cyrillic script"}


def language_tag_problem(tag: str) -> str:
    """Why ``tag`` is not a language tag the agent can have, or '' (an empty tag is no language)."""
    if not tag:
        return ""
    if len(tag) > MAX_TAG_CHARS:
        return f"a language tag is at most {MAX_TAG_CHARS} characters, not {len(tag)}"
    if not re.fullmatch(LANGUAGE_TAG, tag):
        hint = f" (write {tag.replace('_', '-')!r})" if "_" in tag and re.fullmatch(
            LANGUAGE_TAG, tag.replace("_", "-")) else ""
        return (f"{tag!r} is not a BCP 47 language tag{hint}: a language code, then a region if needed, "
                "joined by hyphens (de, en-GB, pt-BR, zh-Hans)")
    return ""


def language_name(tag: str) -> str:
    """The language ``tag`` names, in English words: "German", "Portuguese (Brazil)", "Chinese
    (Traditional)"; the tag as written when its language is not in ``LANGUAGE_NAMES``; '' for no tag."""
    if not tag:
        return ""
    language, *rest = tag.split("-")
    name = LANGUAGE_NAMES.get(language.lower())
    if name is None:
        return tag
    details = []
    for subtag in rest:
        detail = SCRIPT_NAMES.get(subtag.title()) if len(subtag) == 4 and subtag.isalpha() else (
            REGION_NAMES.get(subtag.upper()) if len(subtag) in (2, 3) else None)
        if detail is None:
            return f"{name} ({tag})"  # a subtag without a name: the tag says it exactly
        details.append(detail)
    return f"{name} ({', '.join(details)})" if details else name


def answer_line(tag: str) -> str:
    """The line a player-facing node's system prompt ends with for the agent's language, or ''."""
    return f"Answer in {language_name(tag)}." if tag else ""


def with_answer_line(system_prompt: str, tag: str) -> str:
    """``system_prompt`` followed by ``answer_line(tag)`` (a blank line between), or as it is for no tag."""
    line = answer_line(tag)
    if not line:
        return system_prompt
    return f"{system_prompt.rstrip()}\n\n{line}" if system_prompt.strip() else line


def language_values(tag: str) -> dict[str, str]:
    """What a template reads of the agent's language: ``{{language}}`` and ``{{language_tag}}``."""
    return {"language": language_name(tag), "language_tag": tag}
