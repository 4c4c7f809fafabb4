"""turngym.rewards"""
