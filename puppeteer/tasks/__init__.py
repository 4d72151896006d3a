"""Task suites (declared in envs/*.yaml), loaders from installed data packages, answer extraction, graders."""

from __future__ import annotations

from puppeteer.tasks.extract import (
    extract_boxed,
    extract_code,
    extract_final_text,
    extract_letter,
    extract_math,
    extract_number,
    normalize_math,
    normalize_number,
)
from puppeteer.tasks.graders import (
    CodeGrader,
    ExactGrader,
    Grader,
    LetterGrader,
    MathGrader,
    NumericGrader,
    ReasoningGymGrader,
    default_graders,
    grade_text,
)
from puppeteer.tasks.loaders import ItemSource, Loader, default_loaders
from puppeteer.tasks.packages import DataPackage, MissingDataPackage
from puppeteer.tasks.spec import SuiteSpec, parse_spec
from puppeteer.tasks.suites import SuiteLibrary, available_suites, load_suite, split_sizes, suite_spec

__all__ = [
    "CodeGrader",
    "DataPackage",
    "ExactGrader",
    "Grader",
    "ItemSource",
    "LetterGrader",
    "Loader",
    "MathGrader",
    "MissingDataPackage",
    "NumericGrader",
    "ReasoningGymGrader",
    "SuiteLibrary",
    "SuiteSpec",
    "available_suites",
    "default_graders",
    "default_loaders",
    "extract_boxed",
    "extract_code",
    "extract_final_text",
    "extract_letter",
    "extract_math",
    "extract_number",
    "grade_text",
    "load_suite",
    "normalize_math",
    "normalize_number",
    "parse_spec",
    "split_sizes",
    "suite_spec",
]
