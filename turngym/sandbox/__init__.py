"""turngym.sandbox"""
