"""turngym.server"""
