"""The registry of built-in cases: InterpBench case number -> `module:function` returning a Case.

Factories are named, not imported, so that looking up one case imports only its module.
The 16 main cases (InterpBench Table 10) come first; the cases of Appendix H (Table 11, written
from its one-line descriptions) follow in `APPENDIX_H_FACTORIES`.
"""

MAIN_FACTORIES: dict[str, str] = {
    "3": "rasp_programs.main_counting:case_3",
    "4": "rasp_programs.main_counting:case_4",
    "8": "rasp_programs.main_tokenwise:case_8",
    "11": "rasp_programs.main_counting:case_11",
    "13": "rasp_programs.main_sequence:case_13",
    "18": "rasp_programs.main_counting:case_18",
    "19": "rasp_programs.main_sequence:case_19",
    "20": "rasp_programs.main_counting:case_20",
    "21": "rasp_programs.main_sequence:case_21",
    "26": "rasp_programs.main_sequence:case_26",
    "29": "rasp_programs.main_tokenwise:case_29",
    "33": "rasp_programs.main_tokenwise:case_33",
    "34": "rasp_programs.main_tokenwise:case_34",
    "35": "rasp_programs.main_tokenwise:case_35",
    "36": "rasp_programs.main_tokenwise:case_36",
    "37": "rasp_programs.main_tokenwise:case_37",
}

MAIN_CASE_IDS: tuple[str, ...] = tuple(MAIN_FACTORIES)
"""InterpBench's 16 main cases (Table 10), the ones its evaluation used."""

APPENDIX_H_FACTORIES: dict[str, str] = {
    "2": "rasp_programs.catalogue_positional:case_2",
    "7": "rasp_programs.catalogue_counting:case_7",
    "14": "rasp_programs.catalogue_counting:case_14",
    "15": "rasp_programs.catalogue_numbers:case_15",
    "24": "rasp_programs.catalogue_counting:case_24",
    "25": "rasp_programs.catalogue_counting:case_25",
    "30": "rasp_programs.catalogue_numbers:case_30",
    "31": "rasp_programs.catalogue_numbers:case_31",
    "39": "rasp_programs.catalogue_counting:case_39",
    "40": "rasp_programs.catalogue_numbers:case_40",
    "41": "rasp_programs.catalogue_numbers:case_41",
    "43": "rasp_programs.catalogue_numbers:case_43",
    "44": "rasp_programs.catalogue_counting:case_44",
    "45": "rasp_programs.catalogue_positional:case_45",
    "46": "rasp_programs.catalogue_numbers:case_46",
    "49": "rasp_programs.catalogue_numbers:case_49",
    "50": "rasp_programs.catalogue_math:case_50",
    "51": "rasp_programs.catalogue_numbers:case_51",
    "52": "rasp_programs.catalogue_math:case_52",
    "53": "rasp_programs.catalogue_numbers:case_53",
    "54": "rasp_programs.catalogue_math:case_54",
    "55": "rasp_programs.catalogue_math:case_55",
    "56": "rasp_programs.catalogue_numbers:case_56",
    "58": "rasp_programs.catalogue_positional:case_58",
    "60": "rasp_programs.catalogue_numbers:case_60",
    "62": "rasp_programs.catalogue_numbers:case_62",
    "63": "rasp_programs.catalogue_counting:case_63",
    "64": "rasp_programs.catalogue_numbers:case_64",
    "65": "rasp_programs.catalogue_math:case_65",
    "66": "rasp_programs.catalogue_math:case_66",
    "67": "rasp_programs.catalogue_positional:case_67",
    "68": "rasp_programs.catalogue_numbers:case_68",
    "69": "rasp_programs.catalogue_numbers:case_69",
    "70": "rasp_programs.catalogue_math:case_70",
    "71": "rasp_programs.catalogue_math:case_71",
    "72": "rasp_programs.catalogue_numbers:case_72",
    "73": "rasp_programs.catalogue_math:case_73",
    "75": "rasp_programs.catalogue_numbers:case_75",
    "77": "rasp_programs.catalogue_math:case_77",
    "79": "rasp_programs.catalogue_numbers:case_79",
    "80": "rasp_programs.catalogue_numbers:case_80",
    "82": "rasp_programs.catalogue_positional:case_82",
    "83": "rasp_programs.catalogue_numbers:case_83",
    "84": "rasp_programs.catalogue_math:case_84",
    "85": "rasp_programs.catalogue_numbers:case_85",
    "86": "rasp_programs.catalogue_numbers:case_86",
    "87": "rasp_programs.catalogue_numbers:case_87",
    "90": "rasp_programs.catalogue_numbers:case_90",
    "91": "rasp_programs.catalogue_numbers:case_91",
    "93": "rasp_programs.catalogue_positional:case_93",
    "95": "rasp_programs.catalogue_numbers:case_95",
    "97": "rasp_programs.catalogue_counting:case_97",
    "101": "rasp_programs.catalogue_numbers:case_101",
    "102": "rasp_programs.catalogue_numbers:case_102",
    "103": "rasp_programs.catalogue_positional:case_103",
    "104": "rasp_programs.catalogue_math:case_104",
    "105": "rasp_programs.catalogue_numbers:case_105",
    "106": "rasp_programs.catalogue_numbers:case_106",
    "110": "rasp_programs.catalogue_positional:case_110",
    "111": "rasp_programs.catalogue_positional:case_111",
    "113": "rasp_programs.catalogue_positional:case_113",
    "114": "rasp_programs.catalogue_math:case_114",
    "121": "rasp_programs.catalogue_math:case_121",
    "122": "rasp_programs.catalogue_numbers:case_122",
    "123": "rasp_programs.catalogue_math:case_123",
    "124": "rasp_programs.catalogue_counting:case_124",
    "129": "rasp_programs.catalogue_counting:case_129",
    "130": "rasp_programs.catalogue_numbers:case_130",
}
"""Table 11's further cases (case 19 is in both tables and is built once, above)."""

BUILTIN_FACTORIES: dict[str, str] = {**MAIN_FACTORIES, **APPENDIX_H_FACTORIES}
"""Every built-in case: one registry for get_case and `zoo list`."""

APPENDIX_H_IDS: tuple[str, ...] = ("19", *APPENDIX_H_FACTORIES)
"""Every case Table 11 describes (69), in its order of numbers."""

NOT_BUILT: dict[str, str] = {}
"""Table 11 cases that could not be built, with the reason (shown by `zoo list`); none today."""
