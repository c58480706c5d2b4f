"""The registry of built-in cases: InterpBench case number -> `module:function` returning a Case.

Factories are named, not imported, so that looking up one case imports only its module.
"""

BUILTIN_FACTORIES: dict[str, str] = {
    "3": "rasp_programs.counting:case_3",
    "4": "rasp_programs.counting:case_4",
    "8": "rasp_programs.tokenwise:case_8",
    "11": "rasp_programs.counting:case_11",
    "13": "rasp_programs.sequence:case_13",
    "18": "rasp_programs.counting:case_18",
    "19": "rasp_programs.sequence:case_19",
    "20": "rasp_programs.counting:case_20",
    "21": "rasp_programs.sequence:case_21",
    "26": "rasp_programs.sequence:case_26",
    "29": "rasp_programs.tokenwise:case_29",
    "33": "rasp_programs.tokenwise:case_33",
    "34": "rasp_programs.tokenwise:case_34",
    "35": "rasp_programs.tokenwise:case_35",
    "36": "rasp_programs.tokenwise:case_36",
    "37": "rasp_programs.tokenwise:case_37",
}
