/*
 * The context switch for x86-64, System V ABI.
 *
 *   void *weft__ctx_jump(void **save_sp, void *new_sp, void *arg)
 *                        %rdi            %rsi          %rdx
 *
 * The ABI makes the callee preserve rbx, rbp, r12-r15, rsp, the control
 * bits of MXCSR and the x87 control word; everything else is the caller's
 * to save, and the compiler already assumes a call clobbers it. So a switch
 * is: push those, store rsp, load the other rsp, pop, return. The frame a
 * suspended context leaves on its stack (low addresses first):
 *
 *        +--------------------+  <- saved sp (16-byte aligned)
 *   +0   | MXCSR   | x87 CW   |
 *   +8   | r12                |
 *   +16  | r13                |
 *   +24  | r14                |
 *   +32  | r15                |
 *   +40  | rbx                |
 *   +48  | rbp                |
 *   +56  | return address     |
 *        +--------------------+
 *
 * weft__ctx_make (ctx.c) builds the same frame on a fresh stack, with
 * r12 = the entry function and the return address = weft__ctx_trampoline.
 * `arg` comes back in rax (the return value) and also in rdi, so that a
 * fresh context receives it as entry's first argument.
 */
/* The body of both entry points below; they differ only in how they leave. */
.macro SWITCH_BODY
	pushq %rbp
	pushq %rbx
	pushq %r15
	pushq %r14
	pushq %r13
	pushq %r12
	subq $8, %rsp
	stmxcsr (%rsp)
	fnstcw 4(%rsp)
	movq %rsp, (%rdi)
	movq %rsi, %rsp
	ldmxcsr (%rsp)
	fldcw 4(%rsp)
	addq $8, %rsp
	popq %r12
	popq %r13
	popq %r14
	popq %r15
	popq %rbx
	popq %rbp
	movq %rdx, %rax
	movq %rdx, %rdi
.endm

/* With the hot C code of the loop (WEFT__HOT in internal.h): every park
 * and wake-up runs through here. */
	.section .text.hot.weft_ctx,"ax",@progbits
/* Called (tasks). The return-address predictor pairs this jump's `ret` with
 * the `call` that suspended the side being resumed whenever tasks switch
 * like calls and returns (a task parks, another runs and ends or parks, the
 * first resumes), so `ret` is the right exit, except into a fresh context:
 * nothing called into it, and popping the predictor there would leave it
 * one off for every return that follows. A fresh context is entered with
 * an indirect jump instead. */
	.globl weft__ctx_jump
	.hidden weft__ctx_jump
	.type weft__ctx_jump,@function
	.p2align 4
weft__ctx_jump:
	.cfi_startproc
	SWITCH_BODY
	leaq weft__ctx_trampoline(%rip), %rcx
	cmpq %rcx, (%rsp)
	je 1f
	ret
1:	popq %rcx
	jmp *%rcx
	.cfi_endproc
	.size weft__ctx_jump,.-weft__ctx_jump

/* Tail-called (generators): nothing was pushed on the return-address
 * predictor for this jump, so a `ret` would pop the user's own call site
 * and mispredict every time. An indirect jump is predicted from its own
 * history instead, which a send/yield ping-pong makes regular. */
	.globl weft__ctx_jump_int
	.hidden weft__ctx_jump_int
	.type weft__ctx_jump_int,@function
	.p2align 4
weft__ctx_jump_int:
	.cfi_startproc
	SWITCH_BODY
	popq %rcx
	jmp *%rcx
	.cfi_endproc
	.size weft__ctx_jump_int,.-weft__ctx_jump_int

/* A fresh context's first switch lands here with rsp 16-byte aligned,
 * r12 = entry and rdi = arg. entry is jumped to, not called (a call would
 * push a return-predictor entry that no return ever pops), with a zero
 * return address pushed so that its stack is aligned as after a call and a
 * debugger's backtrace ends here. entry never returns. */
	.globl weft__ctx_trampoline
	.hidden weft__ctx_trampoline
	.type weft__ctx_trampoline,@function
	.p2align 4
weft__ctx_trampoline:
	.cfi_startproc
	.cfi_undefined rip
	pushq $0
	jmp *%r12
	.cfi_endproc
	.size weft__ctx_trampoline,.-weft__ctx_trampoline

	.section .note.GNU-stack,"",@progbits
