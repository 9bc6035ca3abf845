"""fastpath"""
