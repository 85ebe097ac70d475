{   ((1, 16384), 0, 'inductor_standalone'): {   'cache_key': 'a2k5v425yda5m7vuvkkosy7ms3uubrwvwfqvon3xunb6zjtauyxb',
                                                'graph_handle': (   'artifact_compile_range_1_16384_subgraph_0',
                                                                    '/tmp/ccB/torch_compile_cache/a7497f03a4/rank_0_0/backbone/artifact_compile_range_1_16384_subgraph_0')},
    ((1, 16384), 1, 'inductor_standalone'): {   'cache_key': 'acu2w3gbollu7rjuomhmsq5atop4tkb3v244cip7mievssu7xc6b',
                                                'graph_handle': (   'artifact_compile_range_1_16384_subgraph_1',
                                                                    '/tmp/ccB/torch_compile_cache/a7497f03a4/rank_0_0/backbone/artifact_compile_range_1_16384_subgraph_1')},
    ((1, 16384), 4, 'inductor_standalone'): {   'cache_key': 'a2xcubcvlgynwj5kcrwp4accni2asdktclzrvtixbeofbpkfzjva',
                                                'graph_handle': (   'artifact_compile_range_1_16384_subgraph_4',
                                                                    '/tmp/ccB/torch_compile_cache/a7497f03a4/rank_0_0/backbone/artifact_compile_range_1_16384_subgraph_4')}}